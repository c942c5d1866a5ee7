package workload

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Plan is everything a workload file can say: which workloads to run with
// which settings, on which targets, with which remote workers, how many
// repetitions, and an optional concurrency sweep. Command-line flags add to
// it or override it.
type Plan struct {
	Targets     []string
	Workers     []string
	Repetitions int
	Sweep       *Sweep
	Workloads   []*Spec
}

// Sweep repeats every workload at several values of threads or processes,
// for the scaling chart.
type Sweep struct {
	Key    string  `json:"key"`
	Values []int64 `json:"values"`
}

// SweepKeys are the keys a sweep may vary.
var SweepKeys = []string{"threads", "processes"}

// ParseSweep reads "threads=1,2,4".
func ParseSweep(s string) (*Sweep, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return nil, fmt.Errorf("sweep %q: want KEY=V1,V2,... with KEY one of %s", s, strings.Join(SweepKeys, ", "))
	}
	return newSweep(strings.TrimSpace(k), splitList(v))
}

func newSweep(key string, vals []string) (*Sweep, error) {
	if key != "threads" && key != "processes" {
		return nil, fmt.Errorf("sweep: key %q cannot be swept, only %s", key, strings.Join(SweepKeys, ", "))
	}
	if len(vals) == 0 || len(vals) > 32 {
		return nil, fmt.Errorf("sweep %s: want 1 to 32 values, got %d", key, len(vals))
	}
	sw := &Sweep{Key: key}
	for _, v := range vals {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("sweep %s: %q is not a positive integer", key, v)
		}
		sw.Values = append(sw.Values, n)
	}
	return sw, nil
}

// rawWorkload is a workload before resolution, with the file line of each key
// for error messages.
type rawWorkload struct {
	kind   string
	values map[string]string
	lines  map[string]int
	line   int
}

var topKeys = []string{"targets", "workers", "repetitions", "sweep", "defaults", "workloads", "kind"}

// ParsePlan reads a workload file (YAML). Two shapes are accepted: a single
// workload, with "kind" and its keys at the top level; or a list under
// "workloads", each item with its "kind", plus "defaults" that apply to every
// item that has those keys. Either shape may set targets, workers,
// repetitions and sweep. Errors name the file and line. overrides (from
// --set) apply like defaults but win over the file.
func ParsePlan(data []byte, file string, overrides map[string]string) (*Plan, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: empty workload file", file)
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of keys at the top level", file, root.Line)
	}
	at := func(n *yaml.Node) string { return fmt.Sprintf("%s:%d", file, n.Line) }
	p := &Plan{}
	var raws []rawWorkload
	defaults := map[string]string{}
	defaultLines := map[string]int{}
	single := rawWorkload{values: map[string]string{}, lines: map[string]int{}, line: root.Line}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "targets", "workers":
			list, err := scalarList(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", at(v), k.Value, err)
			}
			if k.Value == "targets" {
				p.Targets = list
			} else {
				p.Workers = list
			}
		case "repetitions":
			n, err := strconv.Atoi(v.Value)
			if err != nil || v.Kind != yaml.ScalarNode || n < 1 || n > 1000 {
				return nil, fmt.Errorf("%s: repetitions: want an integer from 1 to 1000, got %q", at(v), v.Value)
			}
			p.Repetitions = n
		case "sweep":
			if v.Kind != yaml.MappingNode || len(v.Content) != 2 {
				return nil, fmt.Errorf("%s: sweep: want one key, e.g. {threads: [1, 2, 4]}", at(v))
			}
			vals, err := scalarList(v.Content[1])
			if err != nil {
				return nil, fmt.Errorf("%s: sweep: %w", at(v), err)
			}
			sw, err := newSweep(v.Content[0].Value, vals)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", at(v), err)
			}
			p.Sweep = sw
		case "defaults":
			if v.Kind != yaml.MappingNode {
				return nil, fmt.Errorf("%s: defaults: want a mapping of workload keys", at(v))
			}
			if err := readValues(v, defaults, defaultLines, at); err != nil {
				return nil, err
			}
		case "workloads":
			if v.Kind != yaml.SequenceNode {
				return nil, fmt.Errorf("%s: workloads: want a list of workloads", at(v))
			}
			for _, item := range v.Content {
				if item.Kind != yaml.MappingNode {
					return nil, fmt.Errorf("%s: each workload is a mapping with a kind", at(item))
				}
				rw := rawWorkload{values: map[string]string{}, lines: map[string]int{}, line: item.Line}
				if err := readValues(item, rw.values, rw.lines, at); err != nil {
					return nil, err
				}
				rw.kind = rw.values["kind"]
				delete(rw.values, "kind")
				if rw.kind == "" {
					return nil, fmt.Errorf("%s: workload without a kind", at(item))
				}
				raws = append(raws, rw)
			}
		case "kind":
			single.kind = v.Value
		default:
			// In the single shape, every other key belongs to the workload.
			if err := readValues(&yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{k, v}}, single.values, single.lines, at); err != nil {
				return nil, err
			}
		}
	}
	if single.kind != "" {
		if len(raws) > 0 {
			return nil, fmt.Errorf("%s: both a top-level kind and a workloads list; use one shape", file)
		}
		raws = append(raws, single)
	} else if len(single.values) > 0 {
		for k, line := range single.lines {
			msg := fmt.Sprintf("%s:%d: unknown top-level key %q", file, line, k)
			if s := suggest(k, topKeys); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			return nil, fmt.Errorf("%s; workload keys go under a kind", msg)
		}
	}
	specs, err := resolveAll(raws, defaults, defaultLines, overrides, file)
	if err != nil {
		return nil, err
	}
	p.Workloads = specs
	return p, nil
}

// ResolveAll resolves workloads named on the command line (no file) with the
// --set overrides.
func ResolveAll(kinds []string, overrides map[string]string) ([]*Spec, error) {
	var raws []rawWorkload
	for _, k := range kinds {
		raws = append(raws, rawWorkload{kind: k, values: map[string]string{}, lines: map[string]int{}})
	}
	return resolveAll(raws, nil, nil, overrides, "")
}

func resolveAll(raws []rawWorkload, defaults map[string]string, defaultLines map[string]int, overrides map[string]string, file string) ([]*Spec, error) {
	used := map[string]bool{}
	var out []*Spec
	for _, rw := range raws {
		k, ok := kinds[rw.kind]
		if !ok {
			_, err := Resolve(rw.kind, nil) // for its message
			if file != "" {
				return nil, fmt.Errorf("%s:%d: %w", file, rw.line, err)
			}
			return nil, err
		}
		has := map[string]bool{}
		for _, key := range k.AllKeys() {
			has[key.Name] = true
		}
		vals := map[string]string{}
		for key, v := range defaults {
			if has[key] {
				vals[key], used[key] = v, true
			}
		}
		for key, v := range rw.values {
			vals[key] = v
		}
		for key, v := range overrides {
			if has[key] {
				vals[key], used["set:"+key] = v, true
			}
		}
		s, err := Resolve(rw.kind, vals)
		if err != nil {
			for key, line := range rw.lines {
				if strings.Contains(err.Error(), strconv.Quote(key)) || strings.Contains(err.Error(), ": "+key+": ") {
					return nil, fmt.Errorf("%s:%d: %w", file, line, err)
				}
			}
			if file != "" {
				return nil, fmt.Errorf("%s:%d: %w", file, rw.line, err)
			}
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no workload to run")
	}
	// A default or override that no workload knows is a typo, not a no-op.
	for key := range defaults {
		if !used[key] {
			return nil, fmt.Errorf("%s:%d: defaults: no workload has a key %q%s", file, defaultLines[key], key, didYouMean(key, raws))
		}
	}
	for key := range overrides {
		if !used["set:"+key] {
			return nil, fmt.Errorf("--set %s: no workload of this run has a key %q%s", key, key, didYouMean(key, raws))
		}
	}
	return out, nil
}

func didYouMean(key string, raws []rawWorkload) string {
	var known []string
	for _, rw := range raws {
		if k, ok := kinds[rw.kind]; ok {
			for _, x := range k.AllKeys() {
				known = append(known, x.Name)
			}
		}
	}
	if s := suggest(key, known); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

// readValues copies a mapping of workload keys; a list value becomes a
// comma-separated one.
func readValues(m *yaml.Node, vals map[string]string, lines map[string]int, at func(*yaml.Node) string) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if _, dup := vals[k.Value]; dup {
			return fmt.Errorf("%s: key %q given twice", at(k), k.Value)
		}
		switch v.Kind {
		case yaml.ScalarNode:
			vals[k.Value] = v.Value
		case yaml.SequenceNode:
			list, err := scalarList(v)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", at(v), k.Value, err)
			}
			vals[k.Value] = strings.Join(list, ",")
		default:
			return fmt.Errorf("%s: %s: want a value or a list of values", at(v), k.Value)
		}
		lines[k.Value] = k.Line
	}
	return nil
}

func scalarList(v *yaml.Node) ([]string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		return splitList(v.Value), nil
	case yaml.SequenceNode:
		var out []string
		for _, c := range v.Content {
			if c.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("want a list of plain values")
			}
			out = append(out, c.Value)
		}
		return out, nil
	}
	return nil, fmt.Errorf("want a value or a list")
}
