//go:build !linux

package dataproto

import (
	"net"
	"os"
)

// sendFile is unavailable: responses are copied.
func sendFile(net.Conn, *os.File, int64, int64) (int64, error, bool) { return 0, nil, false }
