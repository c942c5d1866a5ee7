package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"sigs.k8s.io/yaml"
)

// helmBin is the helm that 'make test' installs into bin/tools.
func helmBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("HELM"); p != "" {
		return p
	}
	p, err := filepath.Abs(filepath.Join("..", "..", "bin", "tools", "helm"))
	must(t, err)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no helm at %s (make tools installs it): %v", p, err)
	}
	return p
}

// k8sTypes are the kinds the chart may render, each decoded into its
// Kubernetes API type.
var k8sTypes = map[string]func() any{
	"apps/v1/StatefulSet":                      func() any { return &appsv1.StatefulSet{} },
	"apps/v1/Deployment":                       func() any { return &appsv1.Deployment{} },
	"apps/v1/DaemonSet":                        func() any { return &appsv1.DaemonSet{} },
	"batch/v1/Job":                             func() any { return &batchv1.Job{} },
	"v1/Service":                               func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                        func() any { return &corev1.ServiceAccount{} },
	"rbac.authorization.k8s.io/v1/ClusterRole": func() any { return &rbacv1.ClusterRole{} },
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
	"storage.k8s.io/v1/CSIDriver":                     func() any { return &storagev1.CSIDriver{} },
	"storage.k8s.io/v1/StorageClass":                  func() any { return &storagev1.StorageClass{} },
}

// TestHelmChart checks deploy/helm/cairn as far as this machine can without
// a Kubernetes cluster:
//   - 'helm lint --strict' passes;
//   - with several value sets, every rendered object decodes strictly into
//     its Kubernetes API type (an unknown field, a wrong type or an unknown
//     kind fails: what kubeconform checks against the schemas);
//   - every command line the chart gives a Cairn container parses with the
//     binary under test (its flags exist, its arguments are right), after
//     the substitutions the kubelet and the shell make;
//   - the pods' certificate step works: 'cairn cert issue' as the init
//     containers run it, from a CA made as the values' comment says.
func TestHelmChart(t *testing.T) {
	helm := helmBin(t)
	chart := filepath.Join("..", "..", "deploy", "helm", "cairn")
	if out, err := exec.Command(helm, "lint", "--strict", chart).CombinedOutput(); err != nil {
		t.Fatalf("helm lint --strict: %v\n%s", err, out)
	}
	// A cairn that checks its arguments instead of running: --help after
	// them makes cobra parse every flag and stop.
	shim := t.TempDir()
	must(t, os.WriteFile(filepath.Join(shim, "cairn"), []byte("#!/bin/sh\nexec "+cairnBin+" \"$@\" --help >/dev/null\n"), 0o755))

	variants := [][]string{
		nil,
		{"--set", "csi.enabled=false"},
		{"--set", "master.replicas=1,volume.create=false,storageClass.default=true"},
		{"--set", "storageClass.parameters.kind=volume,meta.storageClassName=fast,image.tag=v9"},
	}
	for _, v := range variants {
		args := append([]string{"template", "rel", chart, "--namespace", "storage"}, v...)
		out, err := exec.Command(helm, args...).Output()
		if err != nil {
			t.Fatalf("helm %v: %v", args, err)
		}
		kinds := map[string]int{}
		for _, doc := range bytes.Split(out, []byte("\n---")) {
			if len(bytes.TrimSpace(doc)) == 0 || bytes.HasPrefix(bytes.TrimSpace(doc), []byte("# Source")) && !bytes.Contains(doc, []byte("kind:")) {
				continue
			}
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			j, err := yaml.YAMLToJSON(doc)
			must(t, err)
			must(t, json.Unmarshal(j, &meta))
			key := meta.APIVersion + "/" + meta.Kind
			newObj, ok := k8sTypes[key]
			if !ok {
				t.Fatalf("%v: unexpected kind %s:\n%s", v, key, doc)
			}
			kinds[meta.Kind]++
			obj := newObj()
			dec := json.NewDecoder(bytes.NewReader(j))
			dec.DisallowUnknownFields()
			if err := dec.Decode(obj); err != nil {
				t.Fatalf("%v: %s does not decode as %T: %v\n%s", v, key, obj, err, doc)
			}
			if spec := podSpec(obj); spec != nil {
				checkCommands(t, shim, *spec)
			}
		}
		csi := !strings.Contains(strings.Join(v, ","), "csi.enabled=false")
		if kinds["StatefulSet"] != 3 || (csi && (kinds["DaemonSet"] != 1 || kinds["Deployment"] != 1 || kinds["CSIDriver"] != 1)) {
			t.Fatalf("%v: rendered %v", v, kinds)
		}
	}

	// The init containers' certificate step, as they run it.
	ca := t.TempDir()
	mustCairn(t, "cert", "ca", "--dir", ca)
	out := filepath.Join(t.TempDir(), "tls")
	mustCairn(t, "cert", "issue", "--ca", ca, "--kind", "node", "--name", "rel-meta-0", "--out", out, "--host", "rel-meta-0.rel-meta.storage.svc")
	for _, f := range []string{"ca.crt", "tls.crt", "tls.key"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatalf("cert issue wrote no %s: %v", f, err)
		}
	}
}

// podSpec returns the pod template of a workload, nil for other objects.
func podSpec(obj any) *corev1.PodSpec {
	switch o := obj.(type) {
	case *appsv1.StatefulSet:
		return &o.Spec.Template.Spec
	case *appsv1.Deployment:
		return &o.Spec.Template.Spec
	case *appsv1.DaemonSet:
		return &o.Spec.Template.Spec
	case *batchv1.Job:
		return &o.Spec.Template.Spec
	}
	return nil
}

var kubeletVar = regexp.MustCompile(`\$\(([A-Z_]+)\)`)

// checkCommands runs every Cairn container's command line of spec through
// the shim (which only parses it), with the variables the kubelet expands
// ($(POD_NAME)) set as on a pod named like a StatefulSet's first one.
func checkCommands(t *testing.T, shim string, spec corev1.PodSpec) {
	t.Helper()
	env := map[string]string{"POD_NAME": "rel-master-0", "POD_NAMESPACE": "storage", "NODE_NAME": "node-a"}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		if !strings.HasPrefix(c.Image, "cairn:") {
			continue // a CSI sidecar
		}
		argv := append(append([]string{}, c.Command...), c.Args...)
		if len(c.Command) == 0 {
			argv = append([]string{"cairn"}, argv...) // the image's entrypoint
		}
		for i, a := range argv {
			argv[i] = kubeletVar.ReplaceAllStringFunc(a, func(m string) string { return env[m[2:len(m)-1]] })
		}
		if argv[0] == "cairn" {
			argv[0] = filepath.Join(shim, "cairn")
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "PATH="+shim+":"+os.Getenv("PATH"))
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("container %s: %q does not parse: %v\n%s", c.Name, argv, err, out)
		}
	}
}
