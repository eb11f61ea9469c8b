package disk

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func openScheme(t *testing.T, dir, scheme string) *Tier {
	t.Helper()
	tier, err := Open(Options{Dir: dir, MaxBytes: 1 << 20, DownFor: time.Hour, KeyScheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close(context.Background()) })
	return tier
}

// crash leaves the tier as a killed process would: no snapshot, lock gone.
func crash(tier *Tier) {
	tier.closed.Store(true)
	tier.unlock()
	close(tier.closeDone) // nothing is left to close: a later Close returns at once
}

func files(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	_ = filepath.WalkDir(filepath.Join(dir, "v1"), func(p string, d os.DirEntry, err error) error {
		// Object files sit in the 256 shard directories ("00".."ff");
		// v1 itself holds the lock and the snapshot.
		if err == nil && !d.IsDir() && filepath.Base(filepath.Dir(p)) != "v1" && filepath.Base(filepath.Dir(p)) != "tmp" {
			n++
		}
		return nil
	})
	return n
}

// A record written under one cache-key scheme is never served under
// another, whichever way the next start rebuilds its index: the upgrade
// that fixes how requests map to keys must not serve what the old mapping
// stored (a variant poisoned through the hole the upgrade closes).
func TestARecordOfAnotherKeySchemeIsNeverServed(t *testing.T) {
	for _, how := range []string{"clean shutdown (snapshot)", "crash (scan)"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			old := openScheme(t, dir, "") // a release before schemes
			poisoned := rec("https://a/page", "stored under the old mapping")
			poisoned.VaryNames, poisoned.VaryKey = []string{"origin"}, "origin=https://app.example"
			old.Write(poisoned)
			old.Write(rec("https://a/plain", "no vary"))
			drain(t, old)
			if how == "crash (scan)" {
				crash(old)
			} else if err := old.Close(context.Background()); err != nil {
				t.Fatal(err)
			}

			upgraded := openScheme(t, dir, "2")
			rc := upgraded.Recovery()
			if rc.FromSnapshot || rc.Objects != 0 || rc.Rekeyed != 2 {
				t.Fatalf("recovery under a new scheme: %+v, want a scan that removes both records", rc)
			}
			vary := func([]string) string { return "origin=https://app.example" }
			if r, _ := upgraded.Lookup("https://a/page", vary); r != nil {
				t.Fatalf("served a record of the old scheme: %q", r.Body)
			}
			if got := get(upgraded, "https://a/plain"); got != "" {
				t.Fatalf("served a record of the old scheme: %q", got)
			}
			if n := files(t, dir); n != 0 {
				t.Fatalf("%d files of the old scheme left on disk", n)
			}
			if st := upgraded.Stats(); st.RecoveryRekeyed != 2 {
				t.Fatalf("Stats().RecoveryRekeyed = %d, want 2", st.RecoveryRekeyed)
			}

			// What the new release writes survives its own restarts, both ways.
			upgraded.Write(rec("https://a/new", "new"))
			drain(t, upgraded)
			_ = upgraded.Close(context.Background())
			again := openScheme(t, dir, "2")
			if rc := again.Recovery(); !rc.FromSnapshot || rc.Objects != 1 || get(again, "https://a/new") != "new" {
				t.Fatalf("restart under the same scheme: %+v", rc)
			}
			crash(again)
			third := openScheme(t, dir, "2")
			if rc := third.Recovery(); rc.FromSnapshot || rc.Objects != 1 || rc.Rekeyed != 0 || get(third, "https://a/new") != "new" {
				t.Fatalf("scan under the same scheme: %+v", rc)
			}
			// A downgrade goes cold too: the old release reads the new
			// record's scheme field as trailing bytes, and this one reads
			// another scheme.
			crash(third)
			down := openScheme(t, dir, "1")
			if rc := down.Recovery(); rc.Objects != 0 || rc.Rekeyed != 1 {
				t.Fatalf("start under another scheme: %+v", rc)
			}
		})
	}
}

// A file swapped in behind the index (another process, a restore from a
// backup) is not served when its scheme differs: Lookup checks the record
// it read, not only the index.
func TestLookupChecksTheSchemeOfTheFileItReads(t *testing.T) {
	dir := t.TempDir()
	tier := openScheme(t, dir, "2")
	tier.Write(rec("https://a/x", "current"))
	drain(t, tier)
	name := fileName("https://a/x", "")
	var path string
	_ = filepath.WalkDir(filepath.Join(dir, "v1"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && hashOf(d.Name()) == name {
			path = p
		}
		return nil
	})
	if path == "" {
		t.Fatal("record file not found")
	}
	if err := os.WriteFile(path, encode(rec("https://a/x", "old scheme"), ""), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := get(tier, "https://a/x"); got != "" {
		t.Fatalf("served %q from a file of another scheme", got)
	}
}

// The snapshot of another scheme is not trusted, nor is the layout before
// schemes under a scheme; a snapshot's scheme field is checked like the
// rest of it.
func TestSnapshotScheme(t *testing.T) {
	for _, c := range []struct {
		in      string
		scheme  string
		wantErr bool
	}{
		{"EDGI\x00", "", false},
		{"EDGK\x012\x00", "2", false},
		{"EDGK\x00\x00", "", false},
		{"EDGK\x052", "", true},
		{"EDGK", "", true},
		{"EDGX\x00", "", true},
		{"ED", "", true},
	} {
		scheme, _, err := snapshotScheme([]byte(c.in))
		if (err != nil) != c.wantErr || (err == nil && scheme != c.scheme) {
			t.Errorf("snapshotScheme(%q) = %q, %v", c.in, scheme, err)
		}
	}
}
