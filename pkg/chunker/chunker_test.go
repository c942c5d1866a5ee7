package chunker

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
)

// testData returns n pseudo-random bytes that depend only on seed.
func testData(seed uint64, n int) []byte {
	g := splitMix64{state: seed}
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := g.next()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// small configs keep property tests fast while exercising the same code.
var smallFast = Config{Algorithm: FastCDC1, MinSize: 64, AvgSize: 256, MaxSize: 1024}
var smallRabin = Config{Algorithm: Rabin1, MinSize: 64, AvgSize: 256, MaxSize: 1024}

func mustNew(t testing.TB, cfg Config) *Cutter {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%v): %v", cfg, err)
	}
	return c
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		err  string // substring; empty means valid
	}{
		{"default", Default(), ""},
		{"reference", Reference(), ""},
		{"reference rabin", ReferenceRabin(), ""},
		{"smallest", Config{FastCDC1, 64, 128, 129}, ""},
		{"zero value", Config{}, "unknown algorithm"},
		{"unknown algorithm", Config{Algorithm(3), 64, 128, 256}, "unknown algorithm"},
		{"min too small", Config{FastCDC1, 63, 128, 256}, "min size 63"},
		{"negative min", Config{FastCDC1, -1, 128, 256}, "min size -1"},
		{"avg equals min", Config{FastCDC1, 128, 128, 256}, "avg size 128 not above"},
		{"avg below min", Config{Rabin1, 256, 128, 512}, "avg size 128 not above"},
		{"max equals avg", Config{FastCDC1, 64, 128, 128}, "max size 128 not above"},
		{"avg not power of two", Config{FastCDC1, 64, 192, 512}, "not a power of two"},
		{"max too large", Config{FastCDC1, 64, 128, MaxSizeCeiling + 1}, "above"},
		{"max at ceiling", Config{FastCDC1, 64, 1 << 29, MaxSizeCeiling}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			_, newErr := New(tt.cfg)
			if (err == nil) != (newErr == nil) {
				t.Fatalf("Validate = %v but New = %v", err, newErr)
			}
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("Validate(%v) = %v, want nil", tt.cfg, err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("Validate(%v) = %v, want error containing %q", tt.cfg, err, tt.err)
			}
		})
	}
}

func TestGearTableGolden(t *testing.T) {
	g := GearTable()
	want := map[int]uint64{0: 0x6403f467f085d64b, 1: 0xf40e077fcba7fe61, 255: 0x910b65dfe564fdf7}
	for i, w := range want {
		if g[i] != w {
			t.Errorf("gear[%d] = %#x, want %#x", i, g[i], w)
		}
	}
	h := sha256.New()
	for _, v := range g {
		fmt.Fprintf(h, "%016x", v)
	}
	if got, want := fmt.Sprintf("%x", h.Sum(nil)), "8318a879ed33062b2fc8b88e85d5521c45ef62d6cade2e4bb2ffb0e643734549"; got != want {
		t.Errorf("gear table digest = %s, want %s", got, want)
	}
}

func TestRabinTablesGolden(t *testing.T) {
	h := sha256.New()
	for i := range 256 {
		fmt.Fprintf(h, "%016x%016x", rabinMod[i], rabinOut[i])
	}
	if got, want := fmt.Sprintf("%x", h.Sum(nil)), "9bef54c639d01f2444a2758f75a27bfb55128d797f413233757460f50d69e0ef"; got != want {
		t.Errorf("rabin table digest = %s, want %s", got, want)
	}
}

// TestRabinPolynomialIrreducible applies Rabin's irreducibility test for a
// prime degree n: P is irreducible iff x^(2^n) = x mod P and
// gcd(x^2 - x, P) = 1.
func TestRabinPolynomialIrreducible(t *testing.T) {
	p := RabinPolynomial
	if p>>rabinDegree != 1 || p&1 != 1 {
		t.Fatalf("polynomial %#x: want degree %d and a constant term", p, rabinDegree)
	}
	mulMod := func(a, b uint64) uint64 {
		var r uint64
		for ; b != 0; b >>= 1 {
			if b&1 == 1 {
				r ^= a
			}
			a = polyMulX(a, 1, p)
		}
		return r
	}
	x := uint64(2)
	for range rabinDegree {
		x = mulMod(x, x)
	}
	if x != 2 {
		t.Fatalf("x^(2^53) mod P = %#x, want x", x)
	}
	deg := func(a uint64) int {
		d := -1
		for ; a != 0; a >>= 1 {
			d++
		}
		return d
	}
	a, b := p, uint64(4^2) // x^2 + x
	for b != 0 {
		for deg(a) >= deg(b) {
			a ^= b << (deg(a) - deg(b))
		}
		a, b = b, a
	}
	if a != 1 {
		t.Fatalf("gcd(x^2+x, P) = %#x, want 1", a)
	}
}

// TestGoldenCuts pins cut points of fixed pseudo-random input: a change here
// moves chunk boundaries of data already on disk and needs a new Algorithm.
func TestGoldenCuts(t *testing.T) {
	tests := []struct {
		cfg  Config
		seed uint64
		size int
		want []int
	}{
		{smallFast, 1, 8192, []int{262, 386, 767, 1109, 1398, 1660, 2053, 2381, 2658, 2915, 3209, 3562, 3843, 4219, 4692, 5025, 5299, 5584, 5865, 6088, 6419, 6687, 7032, 7101, 7728, 8025, 8192}},
		{smallRabin, 1, 8192, []int{506, 706, 828, 1254, 1607, 1734, 2093, 2322, 2559, 2708, 2998, 3506, 3870, 4503, 4573, 4841, 4954, 5422, 5603, 5813, 6101, 6214, 6742, 6822, 7147, 7375, 7570, 7772, 8192}},
		{Default(), 2, 8 << 20, []int{376103, 726504, 1035611, 1308994, 1596770, 1948263, 2271841, 2554184, 2825633, 3097984, 3394484, 3664081, 3888993, 4084566, 4186477, 4586323, 4865992, 5284139, 5576207, 5702633, 6023257, 6297210, 6619401, 6911783, 7179455, 7725095, 7996772, 8388608}},
		{Reference(), 2, 8 << 20, []int{1311276, 3152124, 5284139, 5702633, 6297210, 7417928, 8388608}},
		{ReferenceRabin(), 2, 8 << 20, []int{615365, 1297401, 3290511, 3307578, 4754142, 7444884, 8388608}},
	}
	for _, tt := range tests {
		t.Run(tt.cfg.String(), func(t *testing.T) {
			got := mustNew(t, tt.cfg).Cut(testData(tt.seed, tt.size))
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("cuts = %#v\nwant   %#v", got, tt.want)
			}
		})
	}
}

// checkBounds fails unless ends tile data with every chunk in
// [MinSize, MaxSize], the last one in [1, MaxSize].
func checkBounds(t testing.TB, cfg Config, n int, ends []int) {
	t.Helper()
	prev := 0
	for i, e := range ends {
		l := e - prev
		last := i == len(ends)-1
		if l < 1 || l > cfg.MaxSize || (!last && l < cfg.MinSize) {
			t.Fatalf("%v: chunk %d of %d has length %d", cfg, i, len(ends), l)
		}
		prev = e
	}
	if prev != n {
		t.Fatalf("%v: chunks cover %d bytes of %d", cfg, prev, n)
	}
}

func TestBoundsProperty(t *testing.T) {
	g := splitMix64{state: 7}
	inputs := map[string][]byte{
		"empty":  nil,
		"one":    {1},
		"zeros":  make([]byte, 20000),
		"ones":   bytes.Repeat([]byte{0xff}, 20000),
		"period": bytes.Repeat([]byte("abcdefghij"), 3000),
	}
	for i := range 20 {
		inputs[fmt.Sprintf("random%d", i)] = testData(g.next(), int(g.next()%50000))
	}
	for trial := range 40 {
		minSize := 64 + int(g.next()%512)
		avg := 1 << (bitLen(minSize) + int(g.next()%4))
		cfg := Config{Algorithm: Algorithm(1 + trial%2), MinSize: minSize, AvgSize: avg, MaxSize: avg + 1 + int(g.next()%uint64(4*avg))}
		c := mustNew(t, cfg)
		for name, data := range inputs {
			ends := c.Cut(data)
			checkBounds(t, cfg, len(data), ends)
			if len(data) > 0 && len(ends) == 0 {
				t.Fatalf("%v %s: no chunks", cfg, name)
			}
		}
	}
}

// bitLen returns the number of bits needed for v > 0.
func bitLen(v int) int {
	n := 0
	for ; v > 0; v >>= 1 {
		n++
	}
	return n
}

// TestDeterminism checks that cuts depend on content only: the same bytes
// in another buffer cut the same, and cutting from any cut point yields the
// remaining cuts (a chunk never looks before its own start).
func TestDeterminism(t *testing.T) {
	for _, cfg := range []Config{smallFast, smallRabin} {
		c := mustNew(t, cfg)
		data := testData(3, 40000)
		ends := c.Cut(data)
		if again := c.Cut(append([]byte(nil), data...)); fmt.Sprint(again) != fmt.Sprint(ends) {
			t.Fatalf("%v: second cut differs", cfg)
		}
		for i, e := range ends[:len(ends)-1] {
			rest := c.Cut(data[e:])
			for j := range rest {
				if rest[j]+e != ends[i+1+j] {
					t.Fatalf("%v: cutting from %d gives %d, want %d", cfg, e, rest[j]+e, ends[i+1+j])
				}
			}
		}
	}
}

func TestAverageSize(t *testing.T) {
	// Loose bounds: they catch a wrong mask width (a factor of 2 or more),
	// not statistical noise.
	data := testData(4, 4<<20)
	for _, cfg := range []Config{
		{FastCDC1, 2048, 8192, 65536},
		{Rabin1, 2048, 8192, 65536},
	} {
		n := len(mustNew(t, cfg).Cut(data))
		mean := len(data) / n
		if mean < cfg.AvgSize*3/4 || mean > cfg.AvgSize*2 {
			t.Errorf("%v: mean chunk %d bytes, want near %d", cfg, mean, cfg.AvgSize)
		}
	}
}

func TestFingerprint(t *testing.T) {
	data := []byte("same content")
	f1, f2 := Sum(FastCDC1, data), Sum(Rabin1, data)
	if f1 == f2 {
		t.Fatal("fingerprints of different algorithms compare equal")
	}
	if f1.Algorithm() != FastCDC1 || f2.Algorithm() != Rabin1 {
		t.Fatalf("algorithms %v %v", f1.Algorithm(), f2.Algorithm())
	}
	if h := sha256.Sum256(data); !bytes.Equal(f1[1:], h[:]) || !bytes.Equal(f2[1:], h[:]) {
		t.Fatal("fingerprint hash is not SHA-256 of the content")
	}
	if Sum(FastCDC1, []byte("other")) == f1 {
		t.Fatal("different content, same fingerprint")
	}
	for _, f := range []Fingerprint{f1, f2} {
		s := f.String()
		if len(s) != 66 || s[:2] != fmt.Sprintf("%02x", f[0]) {
			t.Fatalf("String = %q", s)
		}
		for _, in := range []string{s, strings.ToUpper(s)} {
			p, err := ParseFingerprint(in)
			if err != nil || p != f {
				t.Fatalf("ParseFingerprint(%q) = %v, %v", in, p, err)
			}
		}
		var u Fingerprint
		txt, _ := f.MarshalText()
		if err := u.UnmarshalText(txt); err != nil || u != f {
			t.Fatalf("text round trip: %v, %v", u, err)
		}
	}
	if f1.IsZero() || !(Fingerprint{}).IsZero() {
		t.Fatal("IsZero wrong")
	}
	bad := []struct{ in, err string }{
		{"", "length 0"},
		{f1.String()[:64], "length 64"},
		{f1.String() + "00", "length 68"},
		{"zz" + f1.String()[2:], "invalid byte"},
		{"00" + f1.String()[2:], "unknown algorithm 0"},
		{"03" + f1.String()[2:], "unknown algorithm 3"},
	}
	for _, tt := range bad {
		if _, err := ParseFingerprint(tt.in); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("ParseFingerprint(%q) = %v, want error containing %q", tt.in, err, tt.err)
		}
	}
	var u Fingerprint
	if err := u.UnmarshalText([]byte("00")); err == nil {
		t.Error("UnmarshalText accepted a short value")
	}
}
