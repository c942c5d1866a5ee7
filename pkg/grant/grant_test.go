package grant

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"
)

var t0 = time.Unix(1_800_000_000, 0)

func ring(keys ...Key) *Keyring {
	kr := &Keyring{}
	kr.Set(keys)
	return kr
}

func key(id uint32, created time.Time) Key {
	return Key{ID: id, Secret: bytes.Repeat([]byte{byte(id)}, SecretLen), CreatedMs: created.UnixMilli()}
}

func TestMerge(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in, want []Range
	}{
		{"empty", nil, nil},
		{"touching", []Range{{1, 2, 10, 20}, {1, 2, 0, 10}}, []Range{{1, 2, 0, 20}}},
		{"overlapping", []Range{{1, 2, 0, 15}, {1, 2, 10, 20}}, []Range{{1, 2, 0, 20}}},
		{"a gap stays", []Range{{1, 2, 0, 10}, {1, 2, 11, 20}}, []Range{{1, 2, 0, 10}, {1, 2, 11, 20}}},
		{"other extent", []Range{{1, 3, 0, 10}, {1, 2, 10, 20}}, []Range{{1, 2, 10, 20}, {1, 3, 0, 10}}},
		{"other partition", []Range{{2, 2, 0, 10}, {1, 2, 10, 20}}, []Range{{1, 2, 10, 20}, {2, 2, 0, 10}}},
		{"contained", []Range{{1, 2, 0, 100}, {1, 2, 10, 20}}, []Range{{1, 2, 0, 100}}},
	} {
		if got := Merge(slices.Clone(tc.in)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Merge(%v) = %v, want %v", tc.name, tc.in, got, tc.want)
		}
	}
}

func TestSignVerify(t *testing.T) {
	kr := ring(key(1, t0.Add(-time.Hour)))
	g := Grant{Holder: "abc123", Volume: 7, Ino: 42, Mode: Read, Ranges: []Range{{1, 2, 0, 4096}, {3, 4, 100, 200}}}
	toks, err := kr.Sign(g, time.Minute, t0)
	if err != nil || len(toks) != 1 {
		t.Fatalf("Sign = %d tokens, %v", len(toks), err)
	}
	got, err := kr.Verify(toks[0], "abc123", t0.Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got.Volume != 7 || got.Ino != 42 || got.Mode != Read || got.KeyID != 1 || !slices.Equal(got.Ranges, g.Ranges) {
		t.Fatalf("Verify = %+v", got)
	}
	for _, tc := range []struct {
		name   string
		tok    func() []byte
		holder string
		at     time.Time
		want   error
	}{
		{"expired", func() []byte { return toks[0] }, "abc123", t0.Add(time.Minute), ErrExpired},
		{"another holder", func() []byte { return toks[0] }, "abc124", t0, ErrNotHolder},
		{"a range widened", func() []byte {
			b := slices.Clone(toks[0])
			b[len(b)-MACLen-1] ^= 0x80 // the last range's hi
			return b
		}, "abc123", t0, ErrBadMAC},
		{"mode raised", func() []byte {
			b := slices.Clone(toks[0])
			b[1] = byte(Write)
			return b
		}, "abc123", t0, ErrBadMAC},
		{"MAC cut", func() []byte { return toks[0][:len(toks[0])-1] }, "abc123", t0, ErrMalformed},
		{"empty", func() []byte { return nil }, "abc123", t0, ErrMalformed},
		{"unknown key", func() []byte {
			other, _ := ring(key(9, t0.Add(-time.Hour))).Sign(g, time.Minute, t0)
			return other[0]
		}, "abc123", t0, ErrUnknownKey},
		{"signed with another secret", func() []byte {
			k := key(1, t0.Add(-time.Hour))
			k.Secret = bytes.Repeat([]byte{0xee}, SecretLen)
			other, _ := ring(k).Sign(g, time.Minute, t0)
			return other[0]
		}, "abc123", t0, ErrBadMAC},
	} {
		if _, err := kr.Verify(tc.tok(), tc.holder, tc.at); !errors.Is(err, tc.want) {
			t.Errorf("%s: Verify = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestSignSplits(t *testing.T) {
	kr := ring(key(1, t0))
	var rs []Range
	for i := range MaxRanges + 10 {
		rs = append(rs, Range{1, uint64(i + 1), 0, 10})
	}
	toks, err := kr.Sign(Grant{Holder: "h", Mode: Write, Ranges: rs}, time.Minute, t0)
	if err != nil || len(toks) != 2 {
		t.Fatalf("Sign = %d tokens, %v; want 2", len(toks), err)
	}
	n := 0
	for _, tok := range toks {
		g, err := kr.Verify(tok, "h", t0)
		if err != nil {
			t.Fatal(err)
		}
		n += len(g.Ranges)
	}
	if n != MaxRanges+10 {
		t.Fatalf("%d ranges in the tokens, want %d", n, MaxRanges+10)
	}
	if toks, _ := kr.Sign(Grant{Holder: "h", Mode: Read}, time.Minute, t0); len(toks) != 0 {
		t.Fatalf("a grant of no range gave %d tokens", len(toks))
	}
}

func TestSigningKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys []Key
		want uint32
		none bool
	}{
		{"none", nil, 0, true},
		{"a young cluster's only key", []Key{key(1, t0)}, 1, false},
		{"the new key is not active yet", []Key{key(1, t0.Add(-time.Hour)), key(2, t0.Add(-time.Second))}, 1, false},
		{"the new key is active", []Key{key(1, t0.Add(-time.Hour)), key(2, t0.Add(-Activation))}, 2, false},
		{"newest active of three", []Key{key(3, t0), key(1, t0.Add(-2*time.Hour)), key(2, t0.Add(-time.Hour))}, 2, false},
	} {
		k, ok := ring(tc.keys...).signing(t0)
		if ok == tc.none || (ok && k.ID != tc.want) {
			t.Errorf("%s: signing = %d %v, want %d (none: %v)", tc.name, k.ID, ok, tc.want, tc.none)
		}
	}
	if _, err := ring().Sign(Grant{Ranges: []Range{{1, 1, 0, 1}}}, time.Minute, t0); err == nil {
		t.Error("Sign without a key succeeded")
	}
}

func TestSpans(t *testing.T) {
	now := t0.Unix()
	s := NewSpans(100)
	s.Add(&Grant{Mode: Read, Expires: now + 60, Ranges: []Range{{1, 2, 100, 200}, {1, 2, 300, 400}}})
	s.Add(&Grant{Mode: Write, Expires: now + 10, Ranges: []Range{{1, 3, 0, 50}}})
	s.Own(1, 4, 0, ^uint64(0)>>1, now+60)
	for _, tc := range []struct {
		name      string
		p, e, lo  uint64
		n         uint64
		m         Mode
		at        int64
		want      bool
		wantCount int
	}{
		{"inside", 1, 2, 100, 100, Read, now, true, 0},
		{"past the end", 1, 2, 150, 51, Read, now, false, 0},
		{"the gap between two files", 1, 2, 200, 10, Read, now, false, 0},
		{"across the gap", 1, 2, 150, 200, Read, now, false, 0},
		{"the second file", 1, 2, 300, 100, Read, now, true, 0},
		{"before the first", 1, 2, 0, 10, Read, now, false, 0},
		{"write on a read grant", 1, 2, 100, 10, Write, now, false, 0},
		{"write grant", 1, 3, 10, 10, Write, now, true, 0},
		{"write grant reads", 1, 3, 10, 10, Read, now, true, 0},
		{"another extent", 1, 5, 0, 1, Read, now, false, 0},
		{"another partition", 2, 2, 100, 1, Read, now, false, 0},
		{"own extent", 1, 4, 1 << 30, 1 << 20, Write, now, true, 0},
		{"overflowing length", 1, 4, 10, ^uint64(0), Read, now, false, 0},
		{"expired", 1, 3, 10, 10, Write, now + 10, false, 0},
	} {
		if got := s.Allows(tc.p, tc.e, tc.lo, tc.n, tc.m, tc.at); got != tc.want {
			t.Errorf("%s: Allows = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Touching grants merge; the merged span expires with the earliest.
	s.Add(&Grant{Mode: Read, Expires: now + 5, Ranges: []Range{{1, 2, 200, 300}}})
	if !s.Allows(1, 2, 150, 200, Read, now) {
		t.Error("a read across two touching grants was refused")
	}
	if s.Allows(1, 2, 150, 10, Read, now+5) {
		t.Error("a merged span outlived the token it came from")
	}
}

func TestSpansLimit(t *testing.T) {
	s := NewSpans(6) // an owned range counts twice: for reads and for writes
	for i := range 3 {
		s.Own(1, uint64(i), 0, 10, t0.Unix()+60)
	}
	if !s.Allows(1, 0, 0, 10, Read, t0.Unix()) {
		t.Fatal("first span missing")
	}
	s.Own(1, 9, 0, 10, t0.Unix()+60)
	if s.Allows(1, 0, 0, 10, Read, t0.Unix()) || !s.Allows(1, 9, 0, 10, Read, t0.Unix()) || s.Len() > 6 {
		t.Fatalf("past its limit the set should start over with the new span (len %d)", s.Len())
	}
}

func TestBook(t *testing.T) {
	kr := ring(key(1, t0))
	sign := func(ino uint64, m Mode, ttl time.Duration, rs ...Range) []byte {
		toks, err := kr.Sign(Grant{Holder: "h", Ino: ino, Mode: m, Ranges: rs}, ttl, t0)
		if err != nil {
			t.Fatal(err)
		}
		return toks[0]
	}
	b := NewBook(100)
	b.Add([]byte("not a token"))
	a := sign(1, Read, time.Hour, Range{1, 2, 0, 100})
	c := sign(2, Write, time.Hour, Range{1, 2, 100, 200}, Range{1, 3, 0, 1 << 20})
	b.Add(a)
	b.Add(c)
	for _, tc := range []struct {
		name     string
		p, e, lo uint64
		n        uint64
		m        Mode
		at       time.Time
		want     []byte
	}{
		{"first file", 1, 2, 10, 10, Read, t0, a},
		{"second file", 1, 2, 100, 100, Read, t0, c},
		{"second file, write", 1, 2, 150, 10, Write, t0, c},
		{"first file, write", 1, 2, 10, 10, Write, t0, nil},
		{"across both", 1, 2, 50, 100, Read, t0, nil},
		{"large extent", 1, 3, 4096, 4096, Read, t0, c},
		{"unknown extent", 1, 4, 0, 1, Read, t0, nil},
		{"about to expire", 1, 2, 10, 10, Read, t0.Add(time.Hour - margin), nil},
	} {
		got := b.Find(tc.p, tc.e, tc.lo, tc.n, tc.m, tc.at)
		if (got == nil) != (tc.want == nil) || (got != nil && !bytes.Equal(got.Bytes, tc.want)) {
			t.Errorf("%s: Find = %v, want %v", tc.name, got != nil, tc.want != nil)
		}
	}
	// A newer token of the same file replaces the older one.
	a2 := sign(1, Read, 2*time.Hour, Range{1, 2, 0, 100})
	n := b.Len()
	b.Add(a2)
	if b.Len() != n {
		t.Fatalf("a renewed token added ranges: %d, want %d", b.Len(), n)
	}
	if got := b.Find(1, 2, 0, 100, Read, t0.Add(90*time.Minute)); got == nil || !bytes.Equal(got.Bytes, a2) {
		t.Fatal("the renewed token is not found after the old one expired")
	}
}

func TestBookLimit(t *testing.T) {
	kr := ring(key(1, t0))
	b := NewBook(10)
	for i := range 25 {
		toks, _ := kr.Sign(Grant{Holder: "h", Ino: uint64(i), Mode: Read, Ranges: []Range{{1, uint64(i), 0, 10}}}, time.Hour, time.Now())
		b.Add(toks[0])
		if b.Len() > 10 {
			t.Fatalf("book holds %d ranges, limit 10", b.Len())
		}
	}
	for i, want := range map[uint64]bool{0: false, 14: false, 15: true, 24: true} {
		if got := b.Find(1, i, 0, 10, Read, time.Now()) != nil; got != want {
			t.Errorf("token %d in the book: %v, want %v (the oldest go first)", i, got, want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	toks, _ := ring(key(1, t0)).Sign(Grant{Holder: "h", Mode: Read, Ranges: []Range{{1, 2, 3, 4}}}, time.Minute, t0)
	f.Add(toks[0])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := Decode(b)
		if err != nil {
			return
		}
		body, err := encode(g)
		if err != nil || !bytes.Equal(body, b[:len(b)-MACLen]) {
			t.Fatalf("re-encoding a decoded token differs: %v", err)
		}
	})
}

// BenchmarkVerify is what a data node spends on a token of one range (a
// small file's) and of 64 ranges (a large file written in pieces).
func BenchmarkVerify(b *testing.B) {
	kr := ring(key(1, t0))
	for _, n := range []int{1, 64} {
		rs := make([]Range, n)
		for i := range rs {
			rs[i] = Range{1, uint64(i + 1), 0, 1 << 20}
		}
		toks, _ := kr.Sign(Grant{Holder: "3f2a9c0b1d4e5f60718293a4b5c6d7e8", Mode: Read, Ranges: rs}, time.Hour, time.Now())
		b.Run(strconv.Itoa(n)+"-ranges", func(b *testing.B) {
			for b.Loop() {
				if _, err := kr.Verify(toks[0], "3f2a9c0b1d4e5f60718293a4b5c6d7e8", time.Now()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestBookForget(t *testing.T) {
	kr := ring(key(1, t0))
	sign := func(rs ...Range) []byte {
		toks, _ := kr.Sign(Grant{Holder: "h", Mode: Write, Ranges: rs}, time.Hour, time.Now())
		return toks[0]
	}
	b := NewBook(100)
	b.Add(sign(Range{1, 2, 0, 1 << 40}))                     // a new extent's receipt
	b.Add(sign(Range{1, 3, 4096, 8192}))                     // a small file's
	b.Add(sign(Range{1, 3, 8192, 9000}, Range{1, 4, 0, 10})) // a grant of two ranges
	b.Forget(1, 3, 4096, 8192)
	b.Forget(1, 2, 0, 4096)    // a key inside the extent: the receipt stays
	b.Forget(1, 3, 8192, 9000) // a range of a token with more: stays
	now := time.Now()
	for _, tc := range []struct {
		p, e, lo, n uint64
		want        bool
	}{{1, 2, 0, 4096, true}, {1, 3, 4096, 10, false}, {1, 3, 8192, 10, true}, {1, 4, 0, 10, true}} {
		if got := b.Find(tc.p, tc.e, tc.lo, tc.n, Write, now) != nil; got != tc.want {
			t.Errorf("after Forget, %d/%d at %d held: %v, want %v", tc.p, tc.e, tc.lo, got, tc.want)
		}
	}
	if b.Len() != 3 {
		t.Errorf("%d ranges held, want 3", b.Len())
	}
}

func TestBookKeepsRecentToken(t *testing.T) {
	kr := ring(key(1, t0))
	sign := func(m Mode, ttl time.Duration) []byte {
		toks, _ := kr.Sign(Grant{Holder: "h", Ino: 7, Mode: m, Ranges: []Range{{1, 2, 0, 100}}}, ttl, t0)
		return toks[0]
	}
	b := NewBook(100)
	first := sign(Read, time.Hour)
	b.Add(first)
	b.Add(sign(Read, time.Hour+time.Minute)) // a file opened again a minute later
	if got := b.Find(1, 2, 0, 10, Read, t0); got == nil || !bytes.Equal(got.Bytes, first) {
		t.Fatal("a token barely newer replaced the one data nodes have")
	}
	write := sign(Write, time.Hour)
	b.Add(write) // more rights: replaces
	if got := b.Find(1, 2, 0, 10, Write, t0); got == nil || !bytes.Equal(got.Bytes, write) {
		t.Fatal("a write token did not replace a read one")
	}
	if b.Len() != 1 {
		t.Fatalf("%d ranges, want 1", b.Len())
	}
}
