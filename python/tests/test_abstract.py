"""fsspec's own tests for implementations, against a real cluster."""

import posixpath
import uuid

import pytest

import fsspec.tests.abstract as abstract


class CairnFixtures(abstract.AbstractFixtures):
    @pytest.fixture
    def fs(self, fs):
        return fs

    @pytest.fixture
    def fs_join(self):
        return posixpath.join

    @pytest.fixture
    def fs_path(self, fs):
        path = "default/abstract-" + uuid.uuid4().hex[:10]
        fs.makedirs(path)
        yield path
        fs.rm(path, recursive=True)


class TestCairnCopy(abstract.AbstractCopyTests, CairnFixtures):
    pass


class TestCairnGet(abstract.AbstractGetTests, CairnFixtures):
    pass


class TestCairnPut(abstract.AbstractPutTests, CairnFixtures):
    pass


class TestCairnOpen(abstract.AbstractOpenTests, CairnFixtures):
    pass


class TestCairnPipe(abstract.AbstractPipeTests, CairnFixtures):
    pass
