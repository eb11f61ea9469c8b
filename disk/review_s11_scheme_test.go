package disk

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Every combination of the scheme that wrote a directory, the scheme that
// opens it and how the writer stopped: the snapshot is trusted only under
// its own scheme, and nothing of another scheme survives in the index (the
// purge paths Keys, KeysUnder, KeysWithTag, Has) or on disk, soft-purged
// records and slices of large objects included.
func TestS11SchemeMatrix(t *testing.T) {
	for _, c := range []struct{ wrote, opens string }{
		{"", "2"}, {"2", ""}, {"2", "3"}, {"2", "2"}, {"", ""},
	} {
		for _, clean := range []bool{true, false} {
			name := c.wrote + "→" + c.opens
			if clean {
				name += "/clean"
			} else {
				name += "/crash"
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				w := openScheme(t, dir, c.wrote)
				manifest := rec("https://a/big", "manifest")
				manifest.Surrogates = []string{"tag"}
				slice := rec("https://a/big\x00slice 0", "slice")
				slice.Surrogates = []string{"tag"}
				stale := rec("https://a/stale", "stale")
				w.Write(manifest)
				w.Write(slice)
				w.Write(stale)
				drain(t, w)
				w.MarkStale("https://a/stale")
				if clean {
					if err := w.Close(context.Background()); err != nil {
						t.Fatal(err)
					}
				} else {
					crash(w)
				}
				r := openScheme(t, dir, c.opens)
				rc := r.Recovery()
				same := c.wrote == c.opens
				if rc.FromSnapshot != (same && clean) {
					t.Fatalf("FromSnapshot %v (recovery %+v)", rc.FromSnapshot, rc)
				}
				keys := r.Keys(func(string) bool { return true })
				under := r.KeysUnder("https://a/big")
				tagged := r.KeysWithTag("tag")
				if same {
					if len(keys) != 3 || len(under) != 1 || len(tagged) != 2 || rc.Rekeyed != 0 {
						t.Fatalf("same scheme lost records: keys %q under %q tagged %q %+v", keys, under, tagged, rc)
					}
					if got, _ := r.Lookup("https://a/stale", noVary); got == nil || !got.Stale {
						t.Fatalf("soft purge lost: %+v", got)
					}
					return
				}
				if len(keys) != 0 || len(under) != 0 || len(tagged) != 0 || r.Has("https://a/big") {
					t.Fatalf("another scheme's keys indexed: keys %q under %q tagged %q", keys, under, tagged)
				}
				if rc.Rekeyed != 3 || rc.Objects != 0 || rc.Discarded != 0 {
					t.Fatalf("recovery %+v, want 3 rekeyed", rc)
				}
				for _, k := range []string{"https://a/big", "https://a/big\x00slice 0", "https://a/stale"} {
					if got := get(r, k); got != "" {
						t.Fatalf("%q served %q", k, got)
					}
				}
				if n := files(t, dir); n != 0 {
					t.Fatalf("%d files left", n)
				}
			})
		}
	}
}

// decodeMeta's scheme suffix: only one whole, non-empty string, nothing
// after it.
func TestS11DecodeMetaSchemeSuffix(t *testing.T) {
	base := encodeMeta(rec("k", ""), "")
	ok := map[string][]byte{
		"none":   base,
		"scheme": encodeMeta(rec("k", ""), "2"),
		"long":   encodeMeta(rec("k", ""), string(make([]byte, 300))),
	}
	for name, b := range ok {
		if _, err := decodeMeta(b); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := map[string][]byte{
		"empty scheme":       append(slices.Clone(base), 0),
		"scheme cut":         append(slices.Clone(base), 2, '2'),
		"scheme then byte":   append(slices.Clone(base), 1, '2', 0),
		"two schemes":        append(encodeMeta(rec("k", ""), "2"), 1, '2'),
		"huge length":        append(slices.Clone(base), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
		"overflowing varint": append(slices.Clone(base), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
		"dangling varint":    append(slices.Clone(base), 0x80),
	}
	for name, b := range bad {
		if _, err := decodeMeta(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: accepted (%v)", name, err)
		}
	}
}

// A snapshot of the scheme in force never lets a file of another scheme be
// served, even when the file sits under a name the snapshot lists, and the
// refused file is gone afterwards.
func TestS11SnapshotStartRefusesAndRemovesSwappedFile(t *testing.T) {
	dir := t.TempDir()
	w := openScheme(t, dir, "2")
	w.Write(rec("https://a/x", "v2"))
	drain(t, w)
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var path string
	_ = filepath.WalkDir(filepath.Join(dir, "v1"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && hashOf(d.Name()) == fileName("https://a/x", "") {
			path = p
		}
		return nil
	})
	if err := os.WriteFile(path, encode(rec("https://a/x", "legacy"), ""), 0o600); err != nil {
		t.Fatal(err)
	}
	r := openScheme(t, dir, "2")
	if !r.Recovery().FromSnapshot {
		t.Fatal("snapshot not used")
	}
	if got := get(r, "https://a/x"); got != "" {
		t.Fatalf("served %q", got)
	}
	if r.Has("https://a/x") {
		t.Fatal("still indexed")
	}
	r.removeDropped()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused file left: %v", err)
	}
}
