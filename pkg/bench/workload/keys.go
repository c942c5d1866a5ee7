package workload

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// keyType is the syntax of a workload key's value.
type keyType int

const (
	tInt      keyType = iota // decimal integer
	tSize                    // bytes with an optional unit: 4096, 4KiB, 1.5M (K, M, G, T are powers of 1024)
	tDist                    // a size distribution: 64KiB, uniform(64KiB,112KiB), choice(1KiB,4KiB)
	tSizes                   // a list of sizes: 1KiB,4KiB,64KiB
	tDuration                // Go duration: 30s, 2m, 1h
	tBool                    // true or false
	tRatio                   // a fraction in [0,1]: 0.7 or 70%
	tFloat                   // a positive number
	tEnum                    // one of Choices
	tString                  // free text (a path)
	tList                    // a comma-separated list of Choices
)

func (t keyType) String() string {
	return [...]string{"int", "size", "size distribution", "size list", "duration", "bool", "ratio", "number", "choice", "string", "list"}[t]
}

// Key declares one setting of a workload: its syntax, default, bounds and
// meaning. Validation, defaults, canonical forms and the documentation printed
// by `cairn bench workloads` all come from these declarations.
type Key struct {
	Name     string
	Type     keyType
	Default  string
	Min      int64 // for int, size, dist, sizes (inclusive)
	Max      int64 // for int, size, dist, sizes (inclusive); 0 means no bound
	Choices  []string
	Required bool // no default: the user must set it
	Doc      string
}

// TypeName returns the human name of the key's syntax.
func (k Key) TypeName() string { return k.Type.String() }

var (
	sizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([kKmMgGtT]?)(?:i?[bB])?$`)
	distRE = regexp.MustCompile(`^(uniform|choice)\((.*)\)$`)
)

// ParseSize reads a byte count: a number with an optional K, M, G or T
// (powers of 1024, with or without "iB"/"B"). Negative values are refused.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("size %q cannot be negative", s)
	}
	m := sizeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit (4096, 64KiB, 1.5MiB, 2G)", s)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	mult := map[string]float64{"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[strings.ToLower(m[2])]
	v *= mult
	if v > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("size %q is not a whole number of bytes", s)
	}
	return int64(v), nil
}

// FormatSize prints a byte count with the largest binary unit that divides it.
func FormatSize(n int64) string {
	units := []string{"TiB", "GiB", "MiB", "KiB"}
	for i, u := range units {
		div := int64(1) << (10 * (4 - i))
		if n >= div && n%div == 0 {
			return strconv.FormatInt(n/div, 10) + u
		}
	}
	return strconv.FormatInt(n, 10)
}

// Dist is a distribution of sizes: fixed, uniform over [Lo, Hi], or a uniform
// choice among Choices.
type Dist struct {
	Kind    string // "fixed", "uniform", "choice"
	Lo, Hi  int64
	Choices []int64
}

// ParseDist reads "64KiB", "uniform(64KiB,112KiB)" or "choice(1KiB,4KiB,16KiB)".
func ParseDist(s string) (Dist, error) {
	s = strings.TrimSpace(s)
	m := distRE.FindStringSubmatch(s)
	if m == nil {
		v, err := ParseSize(s)
		if err != nil {
			return Dist{}, fmt.Errorf("%w (or uniform(MIN,MAX), choice(A,B,...))", err)
		}
		return Dist{Kind: "fixed", Lo: v, Hi: v}, nil
	}
	var vals []int64
	for _, p := range strings.Split(m[2], ",") {
		v, err := ParseSize(p)
		if err != nil {
			return Dist{}, fmt.Errorf("%s: %w", m[1], err)
		}
		vals = append(vals, v)
	}
	switch m[1] {
	case "uniform":
		if len(vals) != 2 {
			return Dist{}, fmt.Errorf("uniform takes 2 sizes (MIN,MAX), got %d", len(vals))
		}
		if vals[0] > vals[1] {
			return Dist{}, fmt.Errorf("uniform(%s,%s): minimum above maximum", FormatSize(vals[0]), FormatSize(vals[1]))
		}
		return Dist{Kind: "uniform", Lo: vals[0], Hi: vals[1]}, nil
	default:
		if len(vals) == 0 || len(vals) > 64 {
			return Dist{}, fmt.Errorf("choice takes 1 to 64 sizes, got %d", len(vals))
		}
		lo, hi := vals[0], vals[0]
		for _, v := range vals {
			lo, hi = min(lo, v), max(hi, v)
		}
		return Dist{Kind: "choice", Lo: lo, Hi: hi, Choices: vals}, nil
	}
}

// String is the canonical form (sizes in bytes).
func (d Dist) String() string {
	switch d.Kind {
	case "uniform":
		return fmt.Sprintf("uniform(%d,%d)", d.Lo, d.Hi)
	case "choice":
		parts := make([]string, len(d.Choices))
		for i, c := range d.Choices {
			parts[i] = strconv.FormatInt(c, 10)
		}
		return "choice(" + strings.Join(parts, ",") + ")"
	}
	return strconv.FormatInt(d.Lo, 10)
}

// Human is the distribution with sizes in binary units, for titles.
func (d Dist) Human() string {
	switch d.Kind {
	case "uniform":
		return "uniform(" + FormatSize(d.Lo) + "," + FormatSize(d.Hi) + ")"
	case "choice":
		parts := make([]string, len(d.Choices))
		for i, c := range d.Choices {
			parts[i] = FormatSize(c)
		}
		return "choice(" + strings.Join(parts, ",") + ")"
	}
	return FormatSize(d.Lo)
}

// Rand is the randomness a distribution draws from (math/rand/v2 *Rand).
type Rand interface {
	Int64N(n int64) int64
	IntN(n int) int
}

// Sample draws one size.
func (d Dist) Sample(r Rand) int64 {
	switch d.Kind {
	case "uniform":
		return d.Lo + r.Int64N(d.Hi-d.Lo+1)
	case "choice":
		return d.Choices[r.IntN(len(d.Choices))]
	}
	return d.Lo
}

// Mean is the expected size.
func (d Dist) Mean() float64 {
	switch d.Kind {
	case "uniform":
		return float64(d.Lo+d.Hi) / 2
	case "choice":
		var s float64
		for _, c := range d.Choices {
			s += float64(c)
		}
		return s / float64(len(d.Choices))
	}
	return float64(d.Lo)
}

func checkBounds(k Key, v int64, what string) error {
	if v < k.Min {
		if k.Min == 1 && v == 0 {
			return fmt.Errorf("%s must be at least 1, got 0", what)
		}
		return fmt.Errorf("%s must be at least %d, got %d", what, k.Min, v)
	}
	if k.Max > 0 && v > k.Max {
		return fmt.Errorf("%s must be at most %d, got %d", what, k.Max, v)
	}
	return nil
}

// canon validates v for key k and returns its canonical form.
func (k Key) canon(v string) (string, error) {
	v = strings.TrimSpace(v)
	switch k.Type {
	case tInt:
		n, err := strconv.ParseInt(strings.ReplaceAll(v, "_", ""), 10, 64)
		if err != nil {
			return "", fmt.Errorf("%q is not an integer", v)
		}
		if err := checkBounds(k, n, "value"); err != nil {
			return "", err
		}
		return strconv.FormatInt(n, 10), nil
	case tSize:
		n, err := ParseSize(v)
		if err != nil {
			return "", err
		}
		if err := checkBounds(k, n, "size"); err != nil {
			return "", err
		}
		return strconv.FormatInt(n, 10), nil
	case tDist:
		d, err := ParseDist(v)
		if err != nil {
			return "", err
		}
		if err := checkBounds(k, d.Lo, "smallest size"); err != nil {
			return "", err
		}
		if err := checkBounds(k, d.Hi, "largest size"); err != nil {
			return "", err
		}
		return d.String(), nil
	case tSizes:
		var out []string
		for _, p := range splitList(v) {
			n, err := ParseSize(p)
			if err != nil {
				return "", err
			}
			if err := checkBounds(k, n, "size"); err != nil {
				return "", err
			}
			out = append(out, strconv.FormatInt(n, 10))
		}
		if len(out) == 0 || len(out) > 32 {
			return "", fmt.Errorf("want 1 to 32 sizes, got %d", len(out))
		}
		return strings.Join(out, ","), nil
	case tDuration:
		d, err := time.ParseDuration(v)
		if err != nil {
			return "", fmt.Errorf("%q is not a duration (like 30s, 5m)", v)
		}
		if d <= 0 {
			return "", fmt.Errorf("duration must be positive, got %s", v)
		}
		if d > 24*time.Hour {
			return "", fmt.Errorf("duration must be at most 24h, got %s", v)
		}
		return d.String(), nil
	case tBool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return "", fmt.Errorf("%q is not true or false", v)
		}
		return strconv.FormatBool(b), nil
	case tRatio:
		f, err := parseRatio(v)
		if err != nil {
			return "", err
		}
		return strconv.FormatFloat(f, 'g', -1, 64), nil
	case tFloat:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return "", fmt.Errorf("%q is not a positive number", v)
		}
		if f > 1e6 {
			return "", fmt.Errorf("%q is above 1000000", v)
		}
		return strconv.FormatFloat(f, 'g', -1, 64), nil
	case tEnum:
		for _, c := range k.Choices {
			if v == c {
				return v, nil
			}
		}
		return "", fmt.Errorf("%q is not one of %s", v, strings.Join(k.Choices, ", "))
	case tList:
		var out []string
		seen := map[string]bool{}
		for _, p := range splitList(v) {
			ok := false
			for _, c := range k.Choices {
				ok = ok || p == c
			}
			if !ok {
				return "", fmt.Errorf("%q is not one of %s", p, strings.Join(k.Choices, ", "))
			}
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
		if len(out) == 0 {
			return "", fmt.Errorf("the list is empty")
		}
		return strings.Join(out, ","), nil
	case tString:
		if len(v) > 4096 {
			return "", fmt.Errorf("value longer than 4096 bytes")
		}
		return v, nil
	}
	return "", fmt.Errorf("unknown key type %d", k.Type)
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func parseRatio(v string) (float64, error) {
	pct := strings.HasSuffix(v, "%")
	f, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
	if err != nil || math.IsNaN(f) {
		return 0, fmt.Errorf("%q is not a ratio (0.7 or 70%%)", v)
	}
	if pct {
		f /= 100
	}
	if f < 0 || f > 1 {
		return 0, fmt.Errorf("ratio %q is outside [0, 1]", v)
	}
	return f, nil
}

// suggest returns the known name closest to an unknown one, if any is close.
func suggest(name string, known []string) string {
	best, bestD := "", 4
	for _, k := range known {
		if d := editDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" || bestD > len(name)/2+1 {
		return ""
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
