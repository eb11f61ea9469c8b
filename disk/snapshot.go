package disk

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// The index snapshot. A graceful shutdown writes the index (keys, variants,
// sizes, flags, LRU order) to one file, so that the next start reads one
// file instead of every object's header: 1M objects load in about a second
// instead of the 40-odd seconds a scan takes (docs/storage.md). The start
// that reads it deletes it at once, so that only a clean shutdown's index
// is ever trusted; after a crash there is none, and the scan rebuilds the
// index from the files, discarding what the crash left unfinished.
//
// Layout: "EDGK", the key scheme (Options.KeyScheme, a length-prefixed
// string), then records, each
//
//	key hash (16 bytes) | generation (uvarint) | size (uvarint) | stale (1 byte) | metadata: key,
//	vary key, vary names, surrogate keys (as in encodeMeta)
//
// oldest first, then a zero byte and the CRC-32C of everything before it.
// A snapshot of another key scheme is not used (the scan then removes the
// files of that scheme); "EDGI", the layout before schemes, has no scheme
// field and counts as scheme "".

const (
	snapshotMagic         = "EDGK"
	snapshotMagicNoScheme = "EDGI"
)

func (t *Tier) snapshotPath() string { return filepath.Join(t.root, "index.snap") }

// writeSnapshot writes the index. Under t.mu, after the last write.
func (t *Tier) writeSnapshot() error {
	tmp := t.snapshotPath() + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	crc := crc32.New(castagnoli)
	w := bufio.NewWriterSize(io.MultiWriter(f, crc), 1<<20)
	_, _ = w.WriteString(snapshotMagic)
	_, _ = w.Write(appendString(nil, t.opts.KeyScheme))
	var buf []byte
	keys := t.lru.Keys() // oldest first
	for _, key := range keys {
		o, _ := t.lru.Peek(key)
		for _, v := range o.variants {
			name, err := hex.DecodeString(hashOf(v.name))
			if err != nil || len(name) != 16 {
				continue
			}
			buf = append(buf[:0], 1) // a record follows
			buf = append(buf, name...)
			buf = binary.AppendUvarint(buf, genOf(v.name))
			buf = binary.AppendUvarint(buf, uint64(v.size))
			if v.stale {
				buf = append(buf, 1)
			} else {
				buf = append(buf, 0)
			}
			buf = appendString(buf, key)
			buf = appendString(buf, v.varyKey)
			buf = appendStrings(buf, o.vary)
			buf = appendStrings(buf, v.surrogates)
			_, _ = w.Write(buf)
		}
	}
	_ = w.WriteByte(0) // the end
	err = w.Flush()
	if err == nil {
		err = binary.Write(f, binary.BigEndian, crc.Sum32())
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, t.snapshotPath())
}

// loadSnapshot rebuilds the index from a snapshot and removes it. It
// reports false (and changes nothing) when there is none or it does not
// check out, and the caller scans.
func (t *Tier) loadSnapshot() (bool, error) {
	b, err := os.ReadFile(t.snapshotPath())
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	// Whatever it holds, it is used at most once: if it cannot be
	// removed, a later crash could find it stale, so it is not used.
	if rerr := os.Remove(t.snapshotPath()); err != nil || rerr != nil {
		return false, nil
	}
	if len(b) < len(snapshotMagic)+5 || (string(b[:4]) != snapshotMagic && string(b[:4]) != snapshotMagicNoScheme) ||
		crc32.Checksum(b[:len(b)-4], castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		t.log.Warn("disk tier: index snapshot damaged; scanning the files instead", "dir", t.opts.Dir)
		return false, nil
	}
	scheme, body, err := snapshotScheme(b[:len(b)-4])
	if err != nil {
		t.log.Warn("disk tier: index snapshot unreadable; scanning the files instead", "dir", t.opts.Dir, "err", err)
		return false, nil
	}
	if scheme != t.opts.KeyScheme {
		t.log.Info("disk tier: the index snapshot is of another cache-key scheme; scanning the files to remove that scheme's", "dir", t.opts.Dir,
			"snapshot_scheme", scheme, "scheme", t.opts.KeyScheme)
		return false, nil
	}
	recs, err := parseSnapshot(body)
	if err != nil {
		t.log.Warn("disk tier: index snapshot unreadable; scanning the files instead", "dir", t.opts.Dir, "err", err)
		return false, nil
	}
	for _, r := range recs {
		t.bytes += r.v.size
		t.index(r.key, r.vary, r.v)
	}
	return true, nil
}

// snapshotScheme splits a checked snapshot (without its CRC) into its
// key scheme and its records.
func snapshotScheme(b []byte) (string, []byte, error) {
	if len(b) < 4 {
		return "", nil, fmt.Errorf("%w: short snapshot", ErrCorrupt)
	}
	switch string(b[:4]) {
	case snapshotMagicNoScheme:
		return "", b[4:], nil
	case snapshotMagic:
		m := &metaReader{b: b[4:]}
		scheme := m.str()
		return scheme, m.b, m.err
	}
	return "", nil, fmt.Errorf("%w: bad snapshot magic", ErrCorrupt)
}

type snapRecord struct {
	key  string
	vary []string
	v    *variant
}

func parseSnapshot(b []byte) ([]snapRecord, error) {
	var out []snapRecord
	m := &metaReader{b: b}
	for {
		if len(m.b) == 0 {
			return nil, fmt.Errorf("%w: snapshot ends without its end mark", ErrCorrupt)
		}
		more := m.b[0]
		m.b = m.b[1:]
		if more == 0 {
			break
		}
		if len(m.b) < 17 {
			return nil, fmt.Errorf("%w: short snapshot record", ErrCorrupt)
		}
		hash := hex.EncodeToString(m.b[:16])
		m.b = m.b[16:]
		gen := m.uvarint()
		size := int64(m.uvarint())
		if m.err != nil || len(m.b) < 1 {
			return nil, fmt.Errorf("%w: short snapshot record", ErrCorrupt)
		}
		stale := m.b[0] == 1
		m.b = m.b[1:]
		key, vk := m.str(), m.str()
		vary, tags := m.strs(), m.strs()
		if m.err != nil {
			return nil, m.err
		}
		if size <= 0 || fileName(key, vk) != hash {
			return nil, fmt.Errorf("%w: snapshot record for %q does not match its name", ErrCorrupt, key)
		}
		name := hash + "." + strconv.FormatUint(gen, 36)
		out = append(out, snapRecord{key: key, vary: vary, v: &variant{varyKey: vk, name: name, size: size, stale: stale, surrogates: tags}})
	}
	if len(m.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the snapshot's end", ErrCorrupt, len(m.b))
	}
	return out, nil
}
