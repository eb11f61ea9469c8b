// Package k8scheck validates deploy/k8s the way a cluster would: it builds
// the kustomization with kustomize's own library (krusty, what `kubectl
// apply -k` runs) and decodes every object strictly into the Kubernetes
// API types, so that a misspelt or misplaced field, a wrong type or an
// unknown kind fails here rather than at `kubectl apply`. It is a module
// of its own so that the edge binary does not depend on Kubernetes'
// libraries; `make test` runs it.
package k8scheck

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// build returns the objects of the kustomization in dir.
func build(t *testing.T, dir string) []map[string]any {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var out []map[string]any
	for _, r := range rm.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// strict decodes obj into v, refusing fields v's type does not have.
func strict(obj map[string]any, v any) error {
	b, err := yaml.Marshal(obj)
	if err != nil {
		return err
	}
	return yaml.UnmarshalStrict(b, v)
}

func TestKustomizationBuildsValidObjects(t *testing.T) {
	objs := build(t, "../k8s")
	kinds := map[string]int{}
	var sts appsv1.StatefulSet
	services := map[string]corev1.Service{}
	var pdb policyv1.PodDisruptionBudget
	for _, o := range objs {
		kind, _ := o["kind"].(string)
		kinds[kind]++
		var err error
		switch kind {
		case "StatefulSet":
			err = strict(o, &sts)
		case "Service":
			var s corev1.Service
			err = strict(o, &s)
			services[s.Name] = s
		case "PodDisruptionBudget":
			err = strict(o, &pdb)
		default:
			err = fmt.Errorf("unexpected kind %q", kind)
		}
		if err != nil {
			t.Errorf("%s: %v", kind, err)
		}
		if md, _ := o["metadata"].(map[string]any); md["namespace"] != nil {
			t.Errorf("%s %v sets a namespace: the manifests must work in any (kubectl -n)", kind, md["name"])
		}
	}
	if kinds["Secret"] > 0 {
		t.Error("a Secret is written in the manifests: secrets are the operator's, only referenced")
	}
	if sts.Name == "" {
		t.Fatal("no StatefulSet")
	}
	if s, ok := services[sts.Spec.ServiceName]; !ok || s.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("the StatefulSet's serviceName %q is not a headless Service", sts.Spec.ServiceName)
	}
	if _, ok := services["origin"]; !ok {
		t.Error("no origin Service")
	}
	if pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
		t.Error("the PodDisruptionBudget bounds nothing")
	}
	if sel := pdb.Spec.Selector; sel == nil || sel.MatchLabels["app"] != sts.Spec.Template.Labels["app"] {
		t.Error("the PodDisruptionBudget does not select the StatefulSet's pods")
	}
	pod := sts.Spec.Template.Spec
	if a := pod.Affinity; a == nil || a.PodAntiAffinity == nil {
		t.Error("no pod anti-affinity")
	}
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("pods may run as root")
	}
	for _, c := range pod.Containers {
		if c.ReadinessProbe == nil || c.LivenessProbe == nil || c.StartupProbe == nil {
			t.Errorf("container %s lacks a probe", c.Name)
		}
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
			t.Errorf("container %s has no preStop (drain) hook", c.Name)
		}
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || len(sc.Capabilities.Drop) == 0 {
			t.Errorf("container %s: privilege escalation or capabilities not dropped", c.Name)
		}
		if !strings.Contains(c.Image, ":") {
			t.Errorf("container %s: image %q has no tag after the kustomization's images", c.Name, c.Image)
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name != "edge-cluster" {
				t.Errorf("%s refers to secret %s, which kustomization.yaml does not tell the operator to create", e.Name, e.ValueFrom.SecretKeyRef.Name)
			}
			if strings.Contains(e.Value, ".svc.cluster.local") || strings.Contains(e.Value, ".default.") {
				t.Errorf("%s=%s names a namespace", e.Name, e.Value)
			}
		}
	}
}
