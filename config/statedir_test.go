package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cluster.state_dir may not be cache.disk.path nor inside it however it is
// spelt (the disk tier's recovery removes files it did not write): a
// review found a relative path beside an absolute one, a symbolic link
// into the tier and a name beginning with ".." all accepted. A directory
// beside the tier is fine.
func TestStateDirInsideTheDiskTierIsRefusedHoweverItIsSpelt(t *testing.T) {
	wd, _ := os.Getwd()
	tmp := t.TempDir()
	disk := filepath.Join(tmp, "disk")
	if err := os.MkdirAll(filepath.Join(disk, "tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(tmp, "state-link")
	if err := os.Symlink(filepath.Join(disk, "tmp"), link); err != nil {
		t.Fatal(err)
	}
	load := func(disk, state string) error {
		_, err := LoadBytes([]byte("origin: {url: http://o}\ncache: {disk: {path: '" + disk + "'}}\ncluster: {state_dir: '" + state + "'}"))
		return err
	}
	for _, tc := range []struct{ name, disk, state string }{
		{"the same", disk, disk},
		{"the same, spelt with a trailing slash", disk, disk + "/"},
		{"inside", disk, filepath.Join(disk, "state")},
		{"relative disk, absolute state inside it", "cache-rel", filepath.Join(wd, "cache-rel", "tmp")},
		{"absolute disk, relative state inside it", filepath.Join(wd, "cache-rel"), "cache-rel/tmp"},
		{"a symbolic link into the disk tier", disk, link},
		{"a name beginning with ..", disk, filepath.Join(disk, "..state")},
	} {
		if err := load(tc.disk, tc.state); err == nil || !strings.Contains(err.Error(), "cluster.state_dir") {
			t.Errorf("%s: disk %s, state_dir %s: %v, want an error naming cluster.state_dir", tc.name, tc.disk, tc.state, err)
		}
	}
	for _, state := range []string{filepath.Join(tmp, "disk-state"), filepath.Join(tmp, "..state"), tmp} {
		if err := load(disk, state); err != nil && strings.Contains(err.Error(), "cluster.state_dir") {
			t.Errorf("state_dir %s beside the disk tier %s refused: %v", state, disk, err)
		}
	}
}

// A state_dir that is a file is refused by the configuration (edge config
// check), not first by the node's start; so is a cluster.listen that is
// listen or admin.listen (it failed at bind, "address already in use").
func TestConfigCheckCatchesAStateDirThatIsAFileAndAClusterListenClash(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ y, key string }{
		{"origin: {url: http://o}\ncluster: {state_dir: '" + file + "'}", "cluster.state_dir"},
		{"origin: {url: http://o}\nlisten: 127.0.0.1:8080\ncluster: {listen: 127.0.0.1:8080}", "cluster.listen"},
		{"origin: {url: http://o}\nadmin: {listen: 127.0.0.1:9180}\ncluster: {listen: 127.0.0.1:9180}", "cluster.listen"},
	} {
		if _, err := LoadBytes([]byte(tc.y)); err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%q: %v, want an error naming %s", tc.y, err, tc.key)
		}
	}
}
