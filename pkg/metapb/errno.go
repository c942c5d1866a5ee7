package metapb

import "strconv"

// Errno is a Linux errno value, the error vocabulary of TxnResult.errno and of
// the meta partitions' answers: the meta partition (pkg/metapartition) returns
// them, meta nodes and clients read them. It is part of the protocol, so it
// lives here, beside the messages, and a client needs no server package to
// understand an answer. The values are Linux's on every platform (syscall's
// numbers differ between operating systems), because every consumer of meta
// partition results (FUSE, the SDK, pjdfstest) speaks Linux errno. 0 means
// success.
type Errno int32

// The errno values the meta partition returns (which operation returns which
// is documented in pkg/metapartition's package comment), plus EPERM, EACCES, EXDEV, ELOOP
// ENOTEMPTY, EROFS (a read-only client) and EDQUOT (a directory quota), which the meta node service needs for the checks it makes
// across partitions and for path operations,
// and EIO for a remembered result that cannot be decoded (never expected).
const (
	OK           Errno = 0
	EPERM        Errno = 1
	ENOENT       Errno = 2
	EIO          Errno = 5
	E2BIG        Errno = 7
	EAGAIN       Errno = 11
	EACCES       Errno = 13
	EBUSY        Errno = 16
	EEXIST       Errno = 17
	EXDEV        Errno = 18
	ENOTDIR      Errno = 20
	EISDIR       Errno = 21
	EINVAL       Errno = 22
	EROFS        Errno = 30
	EFBIG        Errno = 27
	ENOSPC       Errno = 28
	ERANGE       Errno = 34
	ENAMETOOLONG Errno = 36
	ENOTEMPTY    Errno = 39
	ELOOP        Errno = 40
	ENODATA      Errno = 61
	ESTALE       Errno = 116
	EDQUOT       Errno = 122

	// EWRONGMP and EMOVING are Cairn's own codes, above every Linux errno, and
	// never reach an application: EWRONGMP says the partition does not own the
	// name under its routing (the caller's map is stale: re-read it and retry
	// elsewhere), EMOVING that the name is being moved by a routing change
	// (retry shortly, same or next routing).
	EWRONGMP Errno = 4097
	EMOVING  Errno = 4098
	// ENSCHANGED refuses a Txn whose path was resolved under an older
	// namespace epoch (Txn.ns_epoch): a fence was applied since, so the
	// meta node resolves the path again. It never reaches a client.
	ENSCHANGED Errno = 4099
)

var errnoNames = map[Errno]string{
	OK:           "OK",
	EPERM:        "EPERM",
	ENOENT:       "ENOENT",
	EIO:          "EIO",
	E2BIG:        "E2BIG",
	EAGAIN:       "EAGAIN",
	EACCES:       "EACCES",
	EROFS:        "EROFS",
	EBUSY:        "EBUSY",
	EEXIST:       "EEXIST",
	EXDEV:        "EXDEV",
	ENOTDIR:      "ENOTDIR",
	EISDIR:       "EISDIR",
	EINVAL:       "EINVAL",
	EFBIG:        "EFBIG",
	ENOSPC:       "ENOSPC",
	ERANGE:       "ERANGE",
	ENAMETOOLONG: "ENAMETOOLONG",
	ENOTEMPTY:    "ENOTEMPTY",
	ELOOP:        "ELOOP",
	ENODATA:      "ENODATA",
	ESTALE:       "ESTALE",
	EDQUOT:       "EDQUOT",
	EWRONGMP:     "EWRONGMP",
	EMOVING:      "EMOVING",
	ENSCHANGED:   "ENSCHANGED",
}

// String returns the symbolic name (ENOENT), or "errno N" for values this
// package does not produce.
func (e Errno) String() string {
	if s, ok := errnoNames[e]; ok {
		return s
	}
	return "errno " + strconv.Itoa(int(e))
}

// Error makes an Errno usable as an error; OK is not meant to be used as one.
func (e Errno) Error() string { return e.String() }
