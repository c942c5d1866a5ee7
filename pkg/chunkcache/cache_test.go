package chunkcache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cairnfs/cairn/pkg/chunker"
)

func fp(i int) chunker.Fingerprint { return chunker.Sum(chunker.FastCDC1, []byte{byte(i)}) }

func TestEvictsLeastRecentlyUsed(t *testing.T) {
	c := New[chunker.Fingerprint](300)
	ctx := context.Background()
	for i := range 3 {
		c.Put(fp(i), make([]byte, 100))
	}
	// Touch 0 so that 1 is the oldest, then add a fourth.
	if _, err := c.Get(ctx, fp(0), func(context.Context) ([]byte, error) { t.Fatal("fetched a cached chunk"); return nil, nil }); err != nil {
		t.Fatal(err)
	}
	c.Put(fp(3), make([]byte, 100))
	fetched := false
	_, _ = c.Get(ctx, fp(1), func(context.Context) ([]byte, error) { fetched = true; return make([]byte, 100), nil })
	if !fetched {
		t.Fatal("chunk 1 should have been evicted")
	}
	if st := c.Stats(); st.Bytes > 300 || st.Entries != 3 {
		t.Fatalf("stats %+v, want at most 300 bytes in 3 entries", st)
	}
	c.Put(fp(9), make([]byte, 400)) // larger than the cache: not kept
	if st := c.Stats(); st.Bytes > 300 {
		t.Fatalf("oversized chunk kept: %+v", st)
	}
}

func TestConcurrentMissesShareOneFetch(t *testing.T) {
	c := New[chunker.Fingerprint](1 << 20)
	var calls atomic.Int32
	release := make(chan struct{})
	fetch := func(context.Context) ([]byte, error) {
		calls.Add(1)
		<-release
		return []byte("chunk"), nil
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := c.Get(context.Background(), fp(1), fetch)
			if err != nil || string(b) != "chunk" {
				t.Errorf("got %q, %v", b, err)
			}
		}()
	}
	for calls.Load() == 0 {
	}
	close(release)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d fetches, want 1", n)
	}
}

func TestFailedFetchNotRemembered(t *testing.T) {
	c := New[chunker.Fingerprint](1 << 20)
	boom := errors.New("data node down")
	if _, err := c.Get(context.Background(), fp(1), func(context.Context) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v, want %v", err, boom)
	}
	b, err := c.Get(context.Background(), fp(1), func(context.Context) ([]byte, error) { return []byte("ok"), nil })
	if err != nil || string(b) != "ok" {
		t.Fatalf("retry got %q, %v", b, err)
	}
}

// TestDelete drops a kept entry, and keeps nothing from a fetch that was
// under way when Delete came, while its caller still gets the bytes.
func TestDelete(t *testing.T) {
	c := New[int](1 << 20)
	ctx := context.Background()
	c.Put(1, []byte("old"))
	c.Delete(1)
	c.Delete(2) // nothing under it: no effect
	if st := c.Stats(); st.Entries != 0 || st.Bytes != 0 {
		t.Fatalf("after Delete: %+v", st)
	}

	started, release := make(chan struct{}), make(chan struct{})
	got := make(chan []byte)
	go func() {
		b, _ := c.Get(ctx, 3, func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return []byte("fetched before the change"), nil
		})
		got <- b
	}()
	<-started
	c.Delete(3)
	close(release)
	if b := <-got; string(b) != "fetched before the change" {
		t.Fatalf("caller got %q", b)
	}
	fetched := false
	b, err := c.Get(ctx, 3, func(context.Context) ([]byte, error) { fetched = true; return []byte("new"), nil })
	if err != nil || string(b) != "new" || !fetched {
		t.Fatalf("after a Delete during the fetch: %q, %v, fetched %v; want a new fetch", b, err, fetched)
	}
}

// TestDeleteIf drops exactly the kept entries the predicate names, and
// counts their bytes out.
func TestDeleteIf(t *testing.T) {
	c := New[int](1 << 20)
	for i := range 10 {
		c.Put(i, make([]byte, 100))
	}
	c.DeleteIf(func(k int) bool { return k%2 == 0 })
	st := c.Stats()
	if st.Entries != 5 || st.Bytes != 500 {
		t.Fatalf("after DeleteIf: %+v, want 5 entries of 500 bytes", st)
	}
	for i := range 10 {
		fetched := false
		_, _ = c.Get(context.Background(), i, func(context.Context) ([]byte, error) { fetched = true; return []byte{1}, nil })
		if fetched != (i%2 == 0) {
			t.Errorf("key %d: fetched %v after DeleteIf of the even keys", i, fetched)
		}
	}
}
