package workload

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Kind is a built-in workload: its keys, its documentation and its
// constructor. Each workload file registers its kinds from init.
type Kind struct {
	Name string
	Doc  string
	Keys []Key
	New  func(s *Spec) (Workload, error)
	// Confined asks for an FS that keeps every path inside the target (the
	// replay of a trace, whose paths and symlinks come from a file).
	Confined bool
}

var kinds = map[string]*Kind{}

func register(k *Kind) {
	if _, dup := kinds[k.Name]; dup {
		panic("workload: kind " + k.Name + " registered twice") // programming error at init
	}
	kinds[k.Name] = k
}

// Kinds lists the built-in workloads, sorted by name.
func Kinds() []*Kind {
	var out []*Kind
	for _, n := range sortedKeys(kinds) {
		out = append(out, kinds[n])
	}
	return out
}

// Lookup returns the kind named name.
func Lookup(name string) (*Kind, bool) {
	k, ok := kinds[name]
	return k, ok
}

// CommonKeys apply to every workload.
var CommonKeys = []Key{
	{Name: "threads", Type: tInt, Default: "1", Min: 1, Max: 4096, Doc: "threads per worker process"},
	{Name: "processes", Type: tInt, Default: "1", Min: 1, Max: 1024, Doc: "worker processes per node; 1 runs the threads inside the master (local node) or the worker daemon (remote node), more spawns `cairn bench worker` processes"},
	{Name: "duration", Type: tDuration, Default: "60s", Doc: "time bound of each phase: a phase stops when its counts are done or this time has passed, whichever comes first (then it is marked truncated)"},
	{Name: "seed", Type: tInt, Default: "1", Min: 0, Doc: "seed of every random choice; the same seed gives the same operations"},
	{Name: "name", Type: tString, Default: "", Doc: "label of this workload in reports (default: the kind)"},
	{Name: "keep", Type: tBool, Default: "false", Doc: "keep the files after the run instead of removing them"},
}

// AllKeys returns the common keys followed by the kind's own.
func (k *Kind) AllKeys() []Key { return append(append([]Key{}, CommonKeys...), k.Keys...) }

// Spec is one fully resolved workload: its kind and every key's canonical
// value (defaults filled in). It is what the master sends to the workers and
// what reports record, so a run can be repeated from its report.
type Spec struct {
	Kind   string            `json:"kind"`
	Values map[string]string `json:"values"`
}

// Resolve validates raw settings for a kind and fills in defaults. Unknown
// keys, malformed values and values out of bounds are errors that name the key
// (and, for a misspelt key, the closest known one).
func Resolve(kind string, raw map[string]string) (*Spec, error) {
	k, ok := kinds[kind]
	if !ok {
		msg := fmt.Sprintf("unknown workload %q", kind)
		if s := suggest(kind, sortedKeys(kinds)); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return nil, fmt.Errorf("%s; known workloads: %s", msg, strings.Join(sortedKeys(kinds), ", "))
	}
	keys := map[string]Key{}
	for _, key := range k.AllKeys() {
		keys[key.Name] = key
	}
	s := &Spec{Kind: kind, Values: map[string]string{}}
	for _, name := range sortedKeys(raw) {
		key, known := keys[name]
		if !known {
			msg := fmt.Sprintf("workload %s: unknown key %q", kind, name)
			if sug := suggest(name, sortedKeys(keys)); sug != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", sug)
			}
			return nil, fmt.Errorf("%s; run 'cairn bench workloads %s' for its keys", msg, kind)
		}
		v, err := key.canon(raw[name])
		if err != nil {
			return nil, fmt.Errorf("workload %s: %s: %w", kind, name, err)
		}
		s.Values[name] = v
	}
	for name, key := range keys {
		if _, set := s.Values[name]; !set {
			if key.Required {
				return nil, fmt.Errorf("workload %s: key %q is required (%s)", kind, name, key.Doc)
			}
			v := key.Default
			if key.Type != tString {
				var err error
				if v, err = key.canon(v); err != nil {
					return nil, fmt.Errorf("workload %s: default of %s: %w", kind, name, err) // a bug in a declaration
				}
			}
			s.Values[name] = v
		}
	}
	if s.Values["name"] == "" {
		s.Values["name"] = kind
	}
	// The constructor checks relations between keys (a phase list that needs
	// a phase it does not include, a block larger than the file...).
	if _, err := k.New(s); err != nil {
		return nil, fmt.Errorf("workload %s: %w", kind, err)
	}
	return s, nil
}

// Check re-validates a spec received from elsewhere (a worker checks the
// master's): it must resolve to exactly itself.
func (s *Spec) Check() error {
	if s == nil {
		return fmt.Errorf("no workload")
	}
	r, err := Resolve(s.Kind, s.Values)
	if err != nil {
		return err
	}
	for k, v := range r.Values {
		if s.Values[k] != v {
			return fmt.Errorf("workload %s: %s is %q, canonically %q", s.Kind, k, s.Values[k], v)
		}
	}
	return nil
}

// With returns a copy of s with key set to value, re-resolved.
func (s *Spec) With(key, value string) (*Spec, error) {
	raw := map[string]string{}
	for k, v := range s.Values {
		raw[k] = v
	}
	raw[key] = value
	return Resolve(s.Kind, raw)
}

// New builds the workload the spec describes.
func (s *Spec) New() (Workload, error) {
	k, ok := kinds[s.Kind]
	if !ok {
		return nil, fmt.Errorf("unknown workload %q", s.Kind)
	}
	return k.New(s)
}

// Confined reports whether the workload needs a confined FS.
func (s *Spec) Confined() bool {
	k, ok := kinds[s.Kind]
	return ok && k.Confined
}

// Accessors. Values are canonical after Resolve, so parsing cannot fail; a
// spec that was not resolved yields zero values, never a panic.

// Int returns an int, size or bool-as-0/1 key.
func (s *Spec) Int(key string) int64 {
	v, _ := strconv.ParseInt(s.Values[key], 10, 64)
	return v
}

// Dist returns a size-distribution key.
func (s *Spec) Dist(key string) Dist {
	d, _ := ParseDist(s.Values[key])
	return d
}

// Sizes returns a size-list key.
func (s *Spec) Sizes(key string) []int64 {
	var out []int64
	for _, p := range splitList(s.Values[key]) {
		v, _ := strconv.ParseInt(p, 10, 64)
		out = append(out, v)
	}
	return out
}

// List returns a list key.
func (s *Spec) List(key string) []string { return splitList(s.Values[key]) }

// Bool returns a bool key.
func (s *Spec) Bool(key string) bool { return s.Values[key] == "true" }

// Float returns a ratio or number key.
func (s *Spec) Float(key string) float64 {
	f, _ := strconv.ParseFloat(s.Values[key], 64)
	return f
}

// Str returns a string or choice key.
func (s *Spec) Str(key string) string { return s.Values[key] }

// Duration returns a duration key.
func (s *Spec) Duration(key string) time.Duration {
	d, _ := time.ParseDuration(s.Values[key])
	return d
}

// Threads is the threads per worker process.
func (s *Spec) Threads() int { return int(s.Int("threads")) }

// Processes is the worker processes per node.
func (s *Spec) Processes() int { return int(s.Int("processes")) }

// Name is the label of the workload in reports.
func (s *Spec) Name() string { return s.Values["name"] }

// Describe prints the keys that differ from their defaults, for titles.
func (s *Spec) Describe() string {
	k, ok := kinds[s.Kind]
	if !ok {
		return s.Kind
	}
	var parts []string
	for _, key := range k.AllKeys() {
		if key.Name == "name" || key.Name == "threads" || key.Name == "processes" {
			continue
		}
		def, _ := key.canon(key.Default)
		if v := s.Values[key.Name]; v != def {
			switch key.Type {
			case tSize:
				n, _ := strconv.ParseInt(v, 10, 64)
				v = FormatSize(n)
			case tDist:
				v = s.Dist(key.Name).Human()
			case tSizes:
				var parts []string
				for _, n := range s.Sizes(key.Name) {
					parts = append(parts, FormatSize(n))
				}
				v = strings.Join(parts, ",")
			}
			parts = append(parts, key.Name+"="+v)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
