package hybridindex

import (
	"strconv"
	"strings"
	"testing"
)

// Golden values pin HashVersion 1. If one of these tests fails, records
// already placed would be looked for on the wrong MP: do not update the
// values, restore the function. The XXH64 values of "", "a", "abc" and the
// 39-byte sentence are the xxHash reference values and were cross-checked
// against github.com/cespare/xxhash/v2 for every length 0..199.
func TestHashGolden(t *testing.T) {
	if HashVersion != 1 {
		t.Fatalf("HashVersion = %d; these golden values are for version 1", HashVersion)
	}
	tests := []struct {
		name string
		hash uint64
		slot int // of 4096
	}{
		{"", 0xef46db3751d8e999, 3828},
		{"a", 0xd24ec4f1a98c6e5b, 3364},
		{"abc", 0x44bc2cf5ad770999, 1099},
		{"Nobody inspects the spammish repetition", 0xfbcea83c8a378bf1, 4028},
		{"Makefile", 0x4319602087657198, 1073},
		{"Kconfig", 0xd22467b4f78fec7a, 3362},
		{"__init__.py", 0xa183dfa10c17e9ea, 2584},
		{"README", 0x793b57f9be3e25d5, 1939},
	}
	for _, tc := range tests {
		if got := Hash(tc.name); got != tc.hash {
			t.Errorf("Hash(%q) = %#016x, want %#016x", tc.name, got, tc.hash)
		}
		if got := SlotOf(tc.name, 4096); got != tc.slot {
			t.Errorf("SlotOf(%q, 4096) = %d, want %d", tc.name, got, tc.slot)
		}
	}
}

func TestHashParentGolden(t *testing.T) {
	tests := []struct {
		parent uint64
		name   string
		hash   uint64
		slot   int // of 4096
	}{
		{1, "Makefile", 0x3ec565086fa5f88f, 1004},
		{2, "Makefile", 0x0bdc9c0c854e5355, 189},
		{1 << 40, "__init__.py", 0x5f0b194ef97a46a4, 1520},
		{0xdeadbeefcafef00d, "Kconfig", 0xc643a9c2f5d6a2c5, 3172},
	}
	for _, tc := range tests {
		if got := HashParent(tc.parent, tc.name); got != tc.hash {
			t.Errorf("HashParent(%d, %q) = %#016x, want %#016x", tc.parent, tc.name, got, tc.hash)
		}
		if got := SlotOfParent(tc.parent, tc.name, 4096); got != tc.slot {
			t.Errorf("SlotOfParent(%d, %q, 4096) = %d, want %d", tc.parent, tc.name, got, tc.slot)
		}
	}
}

// The path-walk hash must equal XXH64 of the documented byte string for
// every length, including the 32-byte stripe loop and names too long to be
// valid (which take the heap path).
func TestHashParentIsXXH64OfPrefixedName(t *testing.T) {
	for _, n := range []int{0, 1, 3, 4, 7, 8, 23, 24, 31, 32, 33, 100, MaxNameLen, MaxNameLen + 1, 1000} {
		name := strings.Repeat("x", n)
		parent := uint64(0x0102030405060708)
		want := Hash("\x08\x07\x06\x05\x04\x03\x02\x01" + name)
		if got := HashParent(parent, name); got != want {
			t.Errorf("len %d: HashParent = %#x, want XXH64(le64(parent)‖name) = %#x", n, got, want)
		}
	}
}

func TestSlotOfHash(t *testing.T) {
	tests := []struct {
		hash  uint64
		slots int
		want  int
	}{
		{0, 4096, 0},
		{^uint64(0), 4096, 4095},
		{1 << 63, 4096, 2048},
		{(1 << 63) - 1, 4096, 2047},
		{^uint64(0), 3, 2},
		{1 << 63, 3, 1},
		{12345, 1, 0},
		{12345, 0, -1},
		{12345, -5, -1},
	}
	for _, tc := range tests {
		if got := SlotOfHash(tc.hash, tc.slots); got != tc.want {
			t.Errorf("SlotOfHash(%#x, %d) = %d, want %d", tc.hash, tc.slots, got, tc.want)
		}
	}
	if SlotOf("x", 0) != -1 || SlotOfParent(1, "x", 0) != -1 {
		t.Error("slot of a zero-slot table is not -1")
	}
}

// Doubling the slot count splits each slot in two: a property a future slot
// split can rely on.
func TestSlotOfHashNests(t *testing.T) {
	for i := range 10000 {
		h := Hash(string(rune(i)) + "name")
		s, s2 := SlotOfHash(h, 4096), SlotOfHash(h, 8192)
		if s2/2 != s {
			t.Fatalf("hash %#x: slot %d of 4096 but %d of 8192", h, s, s2)
		}
	}
}

// Filename hashing must spread distinct names evenly over slots; a broken
// mixer (say, only the low bits) would fail this.
func TestSlotUniformity(t *testing.T) {
	const slots, names = 64, 64 * 1000
	var count [slots]int
	var pcount [slots]int
	for i := range names {
		name := "img_" + strconv.Itoa(i) + ".jpg"
		count[SlotOf(name, slots)]++
		pcount[SlotOfParent(uint64(i), "Makefile", slots)]++
	}
	// Expected 1000 per slot, σ ≈ 31.6; 6σ keeps the test from flaking while
	// catching any real bias.
	for s := range slots {
		if count[s] < 810 || count[s] > 1190 {
			t.Errorf("slot %d holds %d of %d names, want 1000±190", s, count[s], names)
		}
		if pcount[s] < 810 || pcount[s] > 1190 {
			t.Errorf("slot %d holds %d of %d path-walk Makefiles, want 1000±190", s, pcount[s], names)
		}
	}
}

func TestHashDoesNotAllocate(t *testing.T) {
	name := "a_fairly_long_file_name_of_more_than_32_bytes.tar.gz"
	if n := testing.AllocsPerRun(100, func() { _ = Hash(name) }); n != 0 {
		t.Errorf("Hash allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = HashParent(7, name) }); n != 0 {
		t.Errorf("HashParent allocates %v times", n)
	}
}

func BenchmarkHash(b *testing.B) {
	name := "n01440764_10026.JPEG"
	for b.Loop() {
		_ = Hash(name)
	}
}

func BenchmarkHashParent(b *testing.B) {
	name := "n01440764_10026.JPEG"
	for b.Loop() {
		_ = HashParent(123456, name)
	}
}
