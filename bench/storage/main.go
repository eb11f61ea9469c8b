// Command storage compares candidate engines for the edge's disk tier on
// the measures that decide a cache's store: write amplification under
// churn, hit latency, startup time with many objects and RAM per object.
//
// Engines: one file per object (as nginx proxy_cache and the edge's disk
// tier do), bbolt (B+tree, copy-on-write pages), pebble (LSM) and badger
// (LSM with values in a value log). Every engine writes without fsync per
// object, as a cache can: an object lost by a power cut is refetched, and
// each engine's own recovery (or the file tier's checksums) keeps what is
// read whole.
//
// Usage: go run ./storage -dir /tmp/st -trace ../../shared/traces/cache/adaptsize-request.trace.xz
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	badger "github.com/dgraph-io/badger/v4"
	bolt "go.etcd.io/bbolt"
)

type engine interface {
	put(key string, meta, body []byte) error
	get(key string) ([]byte, error)
	del(key string) error
	scan(fn func(key string, meta []byte)) error
	close() error
}

var engines = map[string]func(dir string) (engine, error){
	"files":  openFiles,
	"bbolt":  openBolt,
	"pebble": openPebble,
	"badger": openBadger,
}

func main() {
	dir := flag.String("dir", "/tmp/edge-storage-bench", "scratch directory (removed per engine)")
	tracePath := flag.String("trace", "", "adaptsize trace (time id size), xz or plain")
	budget := flag.Int64("budget", 128<<20, "logical byte budget for the churn phase")
	rounds := flag.Int("rounds", 3, "times the trace is replayed in the churn phase")
	many := flag.Int("objects", 1_000_000, "objects for the startup phase")
	only := flag.String("engines", "files,bbolt,pebble,badger", "engines to run")
	tierN := flag.Int("tier", 0, "measure the edge's disk tier's restarts with this many objects instead")
	flag.Parse()
	if *tierN > 0 {
		tierStartup(filepath.Join(*dir, "tier"), *tierN)
		return
	}
	reqs, err := readTrace(*tracePath)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("trace: %d requests; churn budget %d MiB x %d rounds; startup: %d objects\n\n", len(reqs), *budget>>20, *rounds, *many)
	fmt.Println("| engine | write amplification | disk/logical | hit p50 µs | hit p99 µs (≤64 KiB) | write µs/object | startup s (N objects) | index RAM B/object |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, name := range strings.Split(*only, ",") {
		open := engines[name]
		d := filepath.Join(*dir, name)
		_ = os.RemoveAll(d)
		must(os.MkdirAll(d, 0o755))
		c := churn(open, d, reqs, *budget, *rounds)
		_ = os.RemoveAll(d)
		must(os.MkdirAll(d, 0o755))
		s := startup(open, d, *many)
		_ = os.RemoveAll(d)
		fmt.Printf("| %s | %.2f | %.2f | %.0f | %.0f | %.1f | %.2f | %.0f |\n", name, c.wa, c.spaceAmp, c.p50, c.p99, c.putMicros, s.seconds, s.ramPerObject)
	}
}

type request struct {
	id   string
	size int
}

func readTrace(path string) ([]request, error) {
	var data []byte
	var err error
	if strings.HasSuffix(path, ".xz") {
		data, err = exec.Command("xz", "-dc", path).Output()
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	var out []request
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			continue
		}
		out = append(out, request{id: f[1], size: min(max(n, 1), 1<<20)}) // slices cap an object at 1 MiB
	}
	return out, sc.Err()
}

type churnResult struct{ wa, spaceAmp, p50, p99, putMicros float64 }

// churn replays the trace as a cache: a hit reads, a miss writes and evicts
// least recently used objects until the logical bytes fit the budget.
func churn(open func(string) (engine, error), dir string, reqs []request, budget int64, rounds int) churnResult {
	e, err := open(dir)
	must(err)
	type obj struct {
		size int
		used int64
	}
	index := map[string]*obj{}
	var logical, written int64
	var clock int64
	var lat []time.Duration
	var putTime time.Duration
	puts := 0
	w0 := ioWritten()
	body := make([]byte, 1<<20)
	for i := range body {
		body[i] = byte(rand.Uint32()) // incompressible, as media and compressed pages are
	}
	meta := make([]byte, 96)
	for r := 0; r < rounds; r++ {
		for _, q := range reqs {
			clock++
			key := "https://site.example/p/" + q.id
			if o := index[key]; o != nil {
				o.used = clock
				t := time.Now()
				v, err := e.get(key)
				d := time.Since(t)
				must(err)
				if len(v) != o.size {
					log.Fatalf("%s: %d bytes back, %d stored", key, len(v), o.size)
				}
				if o.size <= 64<<10 {
					lat = append(lat, d)
				}
				continue
			}
			t := time.Now()
			must(e.put(key, meta, body[:q.size]))
			putTime += time.Since(t)
			puts++
			index[key] = &obj{size: q.size, used: clock}
			logical += int64(q.size)
			written += int64(q.size)
			if logical > budget {
				// Evict the least recently used tenth at once, as a
				// cache's evictor runs in batches.
				keys := make([]string, 0, len(index))
				for k := range index {
					keys = append(keys, k)
				}
				slices.SortFunc(keys, func(a, b string) int { return int(index[a].used - index[b].used) })
				for _, k := range keys {
					if logical <= budget*9/10 {
						break
					}
					must(e.del(k))
					logical -= int64(index[k].size)
					delete(index, k)
				}
			}
		}
	}
	must(e.close())
	syscall.Sync()
	wa := float64(ioWritten()-w0) / float64(written)
	space := float64(du(dir)) / float64(logical)
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3
	}
	return churnResult{wa: wa, spaceAmp: space, p50: pct(0.5), p99: pct(0.99), putMicros: float64(putTime.Microseconds()) / float64(puts)}
}

type startupResult struct{ seconds, ramPerObject float64 }

// startup writes n small objects, closes the engine, and measures how long
// a restart takes to reopen it and rebuild the in-memory index (every key
// with its metadata), and the RAM that costs per object.
func startup(open func(string) (engine, error), dir string, n int) startupResult {
	e, err := open(dir)
	must(err)
	body := make([]byte, 512)
	meta := make([]byte, 96)
	for i := 0; i < n; i++ {
		binary.BigEndian.PutUint64(body, rand.Uint64())
		must(e.put("https://site.example/p/"+strconv.Itoa(i), meta, body))
	}
	must(e.close())
	syscall.Sync()
	runtime.GC()
	debug.FreeOSMemory()
	rss0 := rss()
	t := time.Now()
	e, err = open(dir)
	must(err)
	type entry struct {
		size int32
		meta []byte
	}
	index := make(map[string]entry)
	must(e.scan(func(key string, m []byte) { index[key] = entry{size: int32(len(m)), meta: slices.Clone(m)} }))
	secs := time.Since(t).Seconds()
	if len(index) != n {
		log.Fatalf("scan found %d of %d objects", len(index), n)
	}
	runtime.GC()
	ram := float64(rss()-rss0) / float64(n)
	runtime.KeepAlive(index)
	must(e.close())
	return startupResult{seconds: secs, ramPerObject: ram}
}

// ---- one file per object ----

// files stores each object in its own file named by a hash of its key:
// a header (magic, lengths, CRC-32C of everything) then key, meta, body.
// A put writes a temporary file and renames it, so a reader never sees a
// partial object; the checksum catches what the file system lost.
type files struct{ dir string }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func openFiles(dir string) (engine, error) { return &files{dir: dir}, nil }

func (f *files) path(key string) string {
	h := crc32.Checksum([]byte(key), castagnoli)
	h2 := crc32.ChecksumIEEE([]byte(key))
	name := fmt.Sprintf("%08x%08x", h, h2)
	return filepath.Join(f.dir, name[:2], name)
}

func (f *files) put(key string, meta, body []byte) error {
	p := f.path(key)
	buf := make([]byte, 16, 16+len(key)+len(meta)+len(body))
	binary.BigEndian.PutUint32(buf[0:], uint32(len(key)))
	binary.BigEndian.PutUint32(buf[4:], uint32(len(meta)))
	binary.BigEndian.PutUint32(buf[8:], uint32(len(body)))
	buf = append(append(append(buf, key...), meta...), body...)
	binary.BigEndian.PutUint32(buf[12:], crc32.Checksum(buf[16:], castagnoli))
	tmp := p + ".tmp"
	err := os.WriteFile(tmp, buf, 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
			err = os.WriteFile(tmp, buf, 0o644)
		}
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

func (f *files) get(key string) ([]byte, error) {
	b, err := os.ReadFile(f.path(key))
	if err != nil {
		return nil, err
	}
	kl, ml, bl := binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:]), binary.BigEndian.Uint32(b[8:])
	if crc32.Checksum(b[16:], castagnoli) != binary.BigEndian.Uint32(b[12:]) {
		return nil, errors.New("checksum")
	}
	return b[16+kl+ml : 16+kl+ml+bl], nil
}

func (f *files) del(key string) error { return os.Remove(f.path(key)) }

// scan reads each file's header, key and meta (the first 4 KiB), in
// parallel: the directory walk is the index.
func (f *files) scan(fn func(key string, meta []byte)) error {
	dirs, err := os.ReadDir(f.dir)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan string)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for d := range work {
				ents, _ := os.ReadDir(d)
				for _, de := range ents {
					fh, err := os.Open(filepath.Join(d, de.Name()))
					if err != nil {
						continue
					}
					n, _ := fh.Read(buf)
					fh.Close()
					if n < 16 {
						continue
					}
					kl, ml := binary.BigEndian.Uint32(buf), binary.BigEndian.Uint32(buf[4:])
					if int(16+kl+ml) > n {
						continue
					}
					mu.Lock()
					fn(string(buf[16:16+kl]), buf[16+kl:16+kl+ml])
					mu.Unlock()
				}
			}
		}()
	}
	for _, d := range dirs {
		work <- filepath.Join(f.dir, d.Name())
	}
	close(work)
	wg.Wait()
	return nil
}

func (f *files) close() error { return nil }

// ---- bbolt ----

type boltDB struct{ db *bolt.DB }

var metaB, bodyB = []byte("m"), []byte("b")

func openBolt(dir string) (engine, error) {
	db, err := bolt.Open(filepath.Join(dir, "cache.db"), 0o644, &bolt.Options{NoSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(metaB); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(bodyB)
		return err
	})
	return &boltDB{db: db}, err
}

func (b *boltDB) put(key string, meta, body []byte) error {
	return b.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(metaB).Put([]byte(key), meta); err != nil {
			return err
		}
		return tx.Bucket(bodyB).Put([]byte(key), body)
	})
}

func (b *boltDB) get(key string) (out []byte, err error) {
	err = b.db.View(func(tx *bolt.Tx) error {
		out = slices.Clone(tx.Bucket(bodyB).Get([]byte(key)))
		return nil
	})
	return out, err
}

func (b *boltDB) del(key string) error {
	return b.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(metaB).Delete([]byte(key)); err != nil {
			return err
		}
		return tx.Bucket(bodyB).Delete([]byte(key))
	})
}

func (b *boltDB) scan(fn func(string, []byte)) error {
	return b.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(metaB).ForEach(func(k, v []byte) error { fn(string(k), v); return nil })
	})
}

func (b *boltDB) close() error { return b.db.Close() }

// ---- pebble ----

type pebbleDB struct{ db *pebble.DB }

func openPebble(dir string) (engine, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	return &pebbleDB{db: db}, err
}

func (p *pebbleDB) put(key string, meta, body []byte) error {
	b := p.db.NewBatch()
	_ = b.Set([]byte("m/"+key), meta, nil)
	_ = b.Set([]byte("b/"+key), body, nil)
	return b.Commit(pebble.NoSync)
}

func (p *pebbleDB) get(key string) ([]byte, error) {
	v, c, err := p.db.Get([]byte("b/" + key))
	if err != nil {
		return nil, err
	}
	out := slices.Clone(v)
	return out, c.Close()
}

func (p *pebbleDB) del(key string) error {
	b := p.db.NewBatch()
	_ = b.Delete([]byte("m/"+key), nil)
	_ = b.Delete([]byte("b/"+key), nil)
	return b.Commit(pebble.NoSync)
}

func (p *pebbleDB) scan(fn func(string, []byte)) error {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte("m/"), UpperBound: []byte("m0")})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		fn(string(it.Key()[2:]), it.Value())
	}
	return it.Close()
}

func (p *pebbleDB) close() error { return p.db.Close() }

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)              {}
func (quietLogger) Errorf(string, ...any)             {}
func (quietLogger) Fatalf(format string, args ...any) { log.Fatalf(format, args...) }

// ---- badger ----

type badgerDB struct{ db *badger.DB }

func openBadger(dir string) (engine, error) {
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithSyncWrites(false))
	return &badgerDB{db: db}, err
}

func (b *badgerDB) put(key string, meta, body []byte) error {
	return b.db.Update(func(tx *badger.Txn) error {
		if err := tx.Set([]byte("m/"+key), slices.Clone(meta)); err != nil {
			return err
		}
		return tx.Set([]byte("b/"+key), slices.Clone(body))
	})
}

func (b *badgerDB) get(key string) (out []byte, err error) {
	err = b.db.View(func(tx *badger.Txn) error {
		it, err := tx.Get([]byte("b/" + key))
		if err != nil {
			return err
		}
		out, err = it.ValueCopy(nil)
		return err
	})
	return out, err
}

func (b *badgerDB) del(key string) error {
	return b.db.Update(func(tx *badger.Txn) error {
		if err := tx.Delete([]byte("m/" + key)); err != nil {
			return err
		}
		return tx.Delete([]byte("b/" + key))
	})
}

func (b *badgerDB) scan(fn func(string, []byte)) error {
	return b.db.View(func(tx *badger.Txn) error {
		it := tx.NewIterator(badger.IteratorOptions{Prefix: []byte("m/"), PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			fn(string(item.Key()[2:]), v)
		}
		return nil
	})
}

// close runs the value-log GC first, as a long-running cache must, so the
// space figure counts what badger can reclaim.
func (b *badgerDB) close() error {
	for b.db.RunValueLogGC(0.5) == nil {
	}
	return b.db.Close()
}

// ---- measurement helpers ----

func ioWritten() int64 {
	b, err := os.ReadFile("/proc/self/io")
	must(err)
	var w, c int64
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			w, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "cancelled_write_bytes: "); ok {
			c, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return w - c
}

func rss() int64 {
	b, err := os.ReadFile("/proc/self/status")
	must(err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func du(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Sys().(*syscall.Stat_t).Blocks * 512
			}
		}
		return nil
	})
	return n
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
