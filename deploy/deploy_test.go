// Package deploy holds the container and Kubernetes files. Docker has no
// engine on the build machines, so this test validates them by parsing:
// every referenced file exists, every stage and secret referenced is
// defined, and the environment each service sets is a valid edge
// configuration (it is loaded through the real config loader).
package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/edgecache/edge/config"
)

const root = ".."

// loadEnv runs the config loader with env as the only source besides defaults.
func loadEnv(t *testing.T, who string, env map[string]string) {
	t.Helper()
	known := map[string]bool{}
	for _, k := range config.Keys() {
		known[k.Env()] = true
	}
	for k := range env {
		if !known[k] {
			t.Errorf("%s sets %s, which is not an edge configuration variable", who, k)
		}
	}
	for _, k := range config.Keys() {
		t.Setenv(k.Env(), "") // clear, then set what the file sets
		os.Unsetenv(k.Env())
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	v, err := config.NewViper("")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(v); err != nil {
		t.Errorf("%s: its environment does not load: %v", who, err)
	}
}

func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages := map[string]bool{}
	var exposed []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			if len(f) == 4 && strings.EqualFold(f[2], "AS") {
				stages[f[3]] = true
			}
		case "COPY":
			if strings.HasPrefix(f[1], "--from=") {
				if !stages[strings.TrimPrefix(f[1], "--from=")] {
					t.Errorf("COPY %s: no such stage", f[1])
				}
				continue
			}
			for _, src := range f[1 : len(f)-1] {
				if src == "." {
					continue
				}
				if _, err := os.Stat(filepath.Join(root, src)); err != nil {
					t.Errorf("COPY %s: %v", src, err)
				}
			}
		case "RUN":
			if i := slices.Index(f, "./cmd/edge"); i >= 0 {
				if _, err := os.Stat(filepath.Join(root, "cmd/edge/main.go")); err != nil {
					t.Error("the build target ./cmd/edge does not exist")
				}
			}
		case "EXPOSE":
			exposed = append(exposed, f[1:]...)
		}
	}
	if !bytes.Contains(b, []byte(`HEALTHCHECK`)) || !bytes.Contains(b, []byte(`"health", "--config", "/etc/edge/config.yaml"]`)) {
		t.Error("no HEALTHCHECK running edge health with the image's config file (admin.tls in it changes how health connects)")
	}
	if len(stages) < 2 {
		t.Errorf("want a multi-stage build, stages %v", stages)
	}
	for _, p := range []string{"8080", "9180", "7946/tcp", "7946/udp"} {
		if !slices.Contains(exposed, p) {
			t.Errorf("EXPOSE lacks %s", p)
		}
	}
}

// shutdownTimeout is the node's default drain, as config.yaml documents it.
func shutdownTimeout(t *testing.T) time.Duration {
	t.Helper()
	for _, k := range config.Keys() {
		if k.Name == "shutdown_timeout" {
			d, err := time.ParseDuration(k.Default)
			if err != nil {
				t.Fatalf("shutdown_timeout default %q: %v", k.Default, err)
			}
			return d
		}
	}
	t.Fatal("no shutdown_timeout key")
	return 0
}

type composeFile struct {
	Services map[string]struct {
		Build       any               `yaml:"build"`
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
		Volumes     []string          `yaml:"volumes"`
		DependsOn   []string          `yaml:"depends_on"`
		StopGrace   string            `yaml:"stop_grace_period"`
	} `yaml:"services"`
}

// TestContainerConfigListensEverywhere: the image's config loads with only
// EDGE_ORIGIN_URL set and listens on every address of the container.
func TestContainerConfigListensEverywhere(t *testing.T) {
	for _, k := range config.Keys() {
		t.Setenv(k.Env(), "")
		os.Unsetenv(k.Env())
	}
	t.Setenv("EDGE_ORIGIN_URL", "http://origin:8090")
	v, err := config.NewViper(filepath.Join(root, "deploy/container.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(v)
	if err != nil {
		t.Fatalf("deploy/container.yaml with EDGE_ORIGIN_URL: %v", err)
	}
	if !strings.HasPrefix(c.Listen, "0.0.0.0:") || !strings.HasPrefix(c.Admin.Listen, "0.0.0.0:") {
		t.Errorf("listeners %s and %s: not every address of the container", c.Listen, c.Admin.Listen)
	}
	t.Setenv("EDGE_ORIGIN_URL", "")
	os.Unsetenv("EDGE_ORIGIN_URL")
	if _, err := config.Load(v); err == nil || !strings.Contains(err.Error(), "origin.url") {
		t.Errorf("without an origin the image must refuse to start, naming origin.url: %v", err)
	}
}

func TestDockerCompose(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil { // resolves the anchors and merge keys
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, s := range []string{"origin", "edge-1", "edge-2", "edge-3", "prometheus", "grafana"} {
		if _, ok := c.Services[s]; !ok {
			t.Errorf("service %s missing", s)
		}
	}
	hostPorts := map[string]string{}
	mounts := map[string]string{}
	for name, s := range c.Services {
		for _, d := range s.DependsOn {
			if _, ok := c.Services[d]; !ok {
				t.Errorf("%s depends on unknown service %s", name, d)
			}
		}
		for _, p := range s.Ports {
			// IP:HOST:CONTAINER, on the loopback only: the demo's token and
			// secret are placeholders.
			parts := strings.Split(p, ":")
			if len(parts) != 3 || parts[0] != "127.0.0.1" {
				t.Errorf("%s publishes %q: want 127.0.0.1:HOST:CONTAINER", name, p)
				continue
			}
			host := parts[1]
			if prev, dup := hostPorts[host]; dup {
				t.Errorf("host port %s used by %s and %s", host, prev, name)
			}
			hostPorts[host] = name
		}
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if _, err := os.Stat(filepath.Join(root, parts[0])); err != nil {
				t.Errorf("%s mounts %s: %v", name, parts[0], err)
			}
			mounts[parts[1]] = parts[0]
		}
		if strings.HasPrefix(name, "edge-") {
			// Docker's default, 10 s, would kill a node in its drain.
			if grace, err := time.ParseDuration(s.StopGrace); err != nil || grace <= shutdownTimeout(t) {
				t.Errorf("%s: stop_grace_period %q, want more than shutdown_timeout (%s)", name, s.StopGrace, shutdownTimeout(t))
			}
			loadEnv(t, name, s.Environment)
			if s.Environment["EDGE_NODE_ID"] != name {
				t.Errorf("%s: EDGE_NODE_ID %q", name, s.Environment["EDGE_NODE_ID"])
			}
			for _, peer := range strings.Split(s.Environment["EDGE_CLUSTER_PEERS"], ",") {
				id, addr, _ := strings.Cut(peer, "=")
				if _, ok := c.Services[id]; !ok || !strings.HasPrefix(addr, id+":") {
					t.Errorf("%s: peer %q is not a service", name, peer)
				}
			}
		}
	}
	// Prometheus scrapes the services' admin ports and its rule file is mounted.
	pb, err := os.ReadFile(filepath.Join(root, "deploy/compose/prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var prom struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(pb, &prom); err != nil {
		t.Fatal(err)
	}
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				svc, port, _ := strings.Cut(target, ":")
				if _, ok := c.Services[svc]; !ok || port != "9180" {
					t.Errorf("scrape target %s is not a service's admin port", target)
				}
			}
		}
	}
	for _, rf := range prom.RuleFiles {
		if _, ok := mounts[rf]; !ok {
			t.Errorf("rule file %s is not mounted into the prometheus service", rf)
		}
	}
	if mounts["/var/lib/grafana/dashboards"] != "./dashboards" {
		t.Error("the dashboards folder is not mounted where the Grafana provider looks")
	}
	var dash struct {
		Panels []json.RawMessage `json:"panels"`
	}
	db, _ := os.ReadFile(filepath.Join(root, "dashboards/edge.json"))
	if err := json.Unmarshal(db, &dash); err != nil || len(dash.Panels) == 0 {
		t.Errorf("dashboards/edge.json: %v, %d panels", err, len(dash.Panels))
	}
}

func TestKubernetesManifests(t *testing.T) {
	// The objects the kustomization lists (deploy/k8scheck builds it and
	// checks them against the API types; this test checks what they ask
	// of edge).
	var b []byte
	for _, f := range []string{"services.yaml", "origin.yaml", "statefulset.yaml", "pdb.yaml"} {
		part, err := os.ReadFile(filepath.Join(root, "deploy/k8s", f))
		if err != nil {
			t.Fatal(err)
		}
		b = append(append(b, part...), "\n---\n"...)
	}
	type envVar struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom struct {
			SecretKeyRef *struct{ Name, Key string } `yaml:"secretKeyRef"`
			FieldRef     *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	}
	type doc struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		StringData map[string]string `yaml:"stringData"`
		Spec       struct {
			ClusterIP   string `yaml:"clusterIP"`
			ServiceName string `yaml:"serviceName"`
			Template    struct {
				Metadata struct {
					Annotations map[string]string `yaml:"annotations"`
				} `yaml:"metadata"`
				Spec struct {
					Containers []struct {
						Env   []envVar `yaml:"env"`
						Ports []struct {
							Name          string `yaml:"name"`
							ContainerPort int    `yaml:"containerPort"`
						} `yaml:"ports"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	var docs []doc
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var d doc
		if err := dec.Decode(&d); err != nil {
			break
		}
		docs = append(docs, d)
	}
	secrets := map[string]map[string]string{}
	headless := map[string]bool{}
	var sts *doc
	for i, d := range docs {
		switch d.Kind {
		case "Secret":
			secrets[d.Metadata.Name] = d.StringData
		case "Service":
			if d.Spec.ClusterIP == "None" {
				headless[d.Metadata.Name] = true
			}
		case "StatefulSet":
			sts = &docs[i]
		}
	}
	if sts == nil {
		t.Fatal("no StatefulSet")
	}
	if !headless[sts.Spec.ServiceName] {
		t.Errorf("StatefulSet serviceName %q is not a headless Service", sts.Spec.ServiceName)
	}
	if sts.Spec.Template.Metadata.Annotations["prometheus.io/scrape"] != "true" || sts.Spec.Template.Metadata.Annotations["prometheus.io/port"] != "9180" {
		t.Error("scrape annotations missing or not the admin port")
	}
	env := map[string]string{}
	for _, c := range sts.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			switch {
			case e.ValueFrom.SecretKeyRef != nil:
				// Secrets are the operator's (kustomization.yaml says how to
				// make them), never written in the manifests.
				ref := e.ValueFrom.SecretKeyRef
				if _, inlined := secrets[ref.Name]; inlined {
					t.Errorf("secret %s is written in the manifests; it must only be referenced", ref.Name)
				}
				if ref.Name != "edge-cluster" {
					t.Errorf("%s refers to secret %s, which kustomization.yaml does not tell the operator to create", e.Name, ref.Name)
				}
				env[e.Name] = "operator-provided-" + ref.Key
			case e.ValueFrom.FieldRef != nil:
				env[e.Name] = "edge-0"
			default:
				env[e.Name] = e.Value
			}
		}
		if env["EDGE_CLUSTER_DNS"] != sts.Spec.ServiceName {
			// A name relative to the pod's namespace: the manifests work in any.
			t.Errorf("EDGE_CLUSTER_DNS %q does not name the headless service", env["EDGE_CLUSTER_DNS"])
		}
	}
	loadEnv(t, "the StatefulSet", env)
}
