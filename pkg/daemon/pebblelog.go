package daemon

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/cockroachdb/pebble/v2"
)

// PebbleLogger sends a store's messages to a role's log: Pebble's notes
// (WAL recovery, "Found N WALs") at debug level, its errors at error
// level. Fatalf logs and exits, as Pebble's own logger does: Pebble calls
// it only when its invariants no longer hold.
func PebbleLogger(log *slog.Logger) pebble.Logger {
	return pebbleLogger{log.With("component", "store")}
}

type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) { l.log.Debug(fmt.Sprintf(format, args...)) }

func (l pebbleLogger) Errorf(format string, args ...any) { l.log.Error(fmt.Sprintf(format, args...)) }

func (l pebbleLogger) Fatalf(format string, args ...any) {
	l.log.Error("fatal: " + fmt.Sprintf(format, args...))
	os.Exit(1)
}
