/* libcairn: Cairn's client SDK (the stateless path API) as a C library.
 *
 * Every call that can fail returns a negative errno (-ENOENT, ...) and, when
 * err is not NULL, sets *err to a message the caller frees with cairn_free;
 * a non-negative return is the call's result (a handle, a byte count, 0).
 * Paths are absolute inside the volume ("/a/b"). Strings are NUL-terminated
 * UTF-8; buffers returned in *out are the caller's to free with cairn_free.
 * Every function may be called from any thread at once. */
#ifndef CAIRN_H
#define CAIRN_H

#include <stdint.h>

/* cairn_attr is stat(2)'s view of a file. */
typedef struct cairn_attr {
	uint64_t ino;
	uint64_t size;
	uint32_t mode; /* type bits (S_IFREG, S_IFDIR, ...) | permission bits */
	uint32_t nlink;
	uint32_t uid;
	uint32_t gid;
	int64_t atime_ns;
	int64_t mtime_ns;
	int64_t ctime_ns;
	int64_t btime_ns;
} cairn_attr;

#endif
