package daemon

import (
	"io"
	"net/http"
	"testing"
)

// get returns the status of GET url.
func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// The metrics endpoint serves Go's profiles only when asked to: without,
// every profile answers 404, also with a handler of "/" (a master's
// console, which a follower proxies to the leader), while /metrics and
// /healthz are served either way.
func TestTelemetryProfilesOnlyWhenAsked(t *testing.T) {
	profiles := []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/symbol", "/debug/pprof/goroutine", "/debug/pprof/heap"}
	for _, on := range []bool{false, true} {
		tm, err := StartTelemetry(nil, "127.0.0.1:0", on, func() error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		tm.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "console") }))
		base := "http://" + tm.Addr()
		for _, p := range []string{"/metrics", "/healthz", "/"} {
			if code := get(t, base+p); code != http.StatusOK {
				t.Errorf("profiles %v: GET %s answered %d, want 200", on, p, code)
			}
		}
		want := http.StatusNotFound
		if on {
			want = http.StatusOK
		}
		for _, p := range profiles {
			if code := get(t, base+p); code != want {
				t.Errorf("profiles %v: GET %s answered %d, want %d", on, p, code, want)
			}
		}
		if err := tm.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
