// Command synthtrace writes synthetic cache traces of kinds the shared
// traces do not cover, as big-endian int64 keys (edge sim cache --format
// int64be), for checking indicator policies on data they were not tuned on:
//
//   - drift: Zipf(0.9) over 10^6 keys whose popularity order is reshuffled
//     every 50 000 requests (a moving crowd);
//   - scan: a hot Zipf set interleaved with long sequential scans over
//     more keys than the caches hold (block storage, backups);
//   - churn: 70 % one-hit wonders, the rest Zipf(1.0) (a CDN's long tail);
//   - loop: cycles over 40 000 keys, more than three caches of 10 000 hold
//     (LRU's worst case: every cache holds what will be asked last), with
//     a fifth of the requests on a small hot set.
//
// The generator is seeded, so a trace is the same on every machine.
package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
)

func main() {
	kind := flag.String("kind", "drift", "drift, scan, churn or loop")
	n := flag.Int("requests", 400000, "requests to write")
	seed := flag.Uint64("seed", 1, "random seed")
	out := flag.String("o", "", "output file (default stdout)")
	flag.Parse()
	if err := run(*kind, *n, *seed, *out); err != nil {
		fmt.Fprintln(os.Stderr, "synthtrace:", err)
		os.Exit(1)
	}
}

func run(kind string, n int, seed uint64, out string) (err error) {
	w := os.Stdout
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer func() {
			if cerr := f.Close(); err == nil {
				err = cerr // a failed close can lose written data
			}
		}()
		w = f
	}
	bw := bufio.NewWriter(w)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	next, err := generator(kind, rng)
	if err != nil {
		return err
	}
	var b [8]byte
	for range n {
		binary.BigEndian.PutUint64(b[:], next())
		if _, err := bw.Write(b[:]); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func generator(kind string, rng *rand.Rand) (func() uint64, error) {
	switch kind {
	case "drift":
		const keys = 1 << 20
		z := rand.NewZipf(rng, 1.0001, 1, keys-1) // s must be > 1; the tail is close to 1.0
		perm := uint64(rng.Uint64())
		i := 0
		return func() uint64 {
			if i%50000 == 0 {
				perm = rng.Uint64() // a new popularity order
			}
			i++
			return (z.Uint64() ^ perm) & (keys - 1)
		}, nil
	case "scan":
		z := rand.NewZipf(rng, 1.2, 1, 20000)
		var scanAt, scanLeft uint64
		scanBase := uint64(1 << 40)
		return func() uint64 {
			if scanLeft == 0 && rng.IntN(20000) == 0 {
				scanAt, scanLeft = scanBase, 60000
				scanBase += 1 << 20
			}
			if scanLeft > 0 && rng.IntN(2) == 0 {
				scanLeft--
				scanAt++
				return scanAt
			}
			return z.Uint64()
		}, nil
	case "churn":
		z := rand.NewZipf(rng, 1.0001, 1, 200000)
		fresh := uint64(1 << 40)
		return func() uint64 {
			if rng.IntN(10) < 7 {
				fresh++
				return fresh
			}
			return z.Uint64()
		}, nil
	case "loop":
		z := rand.NewZipf(rng, 1.2, 1, 2000)
		i := uint64(0)
		return func() uint64 {
			if rng.IntN(5) == 0 {
				return 1<<40 + z.Uint64()
			}
			i++
			return i % 40000
		}, nil
	}
	return nil, fmt.Errorf("kind %q, want drift, scan, churn or loop", kind)
}
