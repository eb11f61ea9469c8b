package config

import (
	"strings"
	"testing"
)

// A review found (now mended): a size written as a plain YAML integer from 4EiB up to
// 9223372036854775807 loads, though 180e7c3 calls a larger whole number
// "too large (at most 4EiB)" and ParseSize refuses the same digits quoted
// ("not a whole number of bytes below 4 EiB"). parser.size (config/config.go)
// caps only its float64 branch; the int/int64 branches take any value.
// limits.max_buffered_bytes: 9223372036854775807 then passes `edge config
// check`, and node.New's debug.SetMemoryLimit(cache.max_bytes +
// limits.max_buffered_bytes + memoryHeadroom) overflows to a negative value,
// which SetMemoryLimit takes as a query: the node runs with no memory limit
// and no word. Fix: in size, after the switch, `if n > 1<<62 { p.fail(key,
// raw, "is too large (at most 4EiB)") }` for every branch.
func TestS25ASizeAbove4EiBWrittenAsAnIntegerIsRefused(t *testing.T) {
	for _, body := range []string{
		"cache: {max_bytes: 5000000000000000000}\n",
		"limits: {max_buffered_bytes: 9223372036854775807}\n",
	} {
		c, err := LoadBytes([]byte("origin: {url: http://127.0.0.1:9}\n" + body))
		if err == nil || !strings.Contains(err.Error(), "too large") {
			t.Errorf("%q: err %v (cache.max_bytes %d, limits.max_buffered_bytes %d); want \"is too large (at most 4EiB)\"",
				strings.TrimSpace(body), err, c.Cache.MaxBytes, c.Limits.MaxBufferedBytes)
		}
	}
}

// A review found (now mended): the commit's "a whole number too large for an int echoed as
// written and called too large, not 'not a size'" holds only for numbers
// YAML decodes as float64. One from 2^63 to 2^64-1 decodes as uint64, which
// parser.size and parser.int have no case for: "18446744073709551615 is not
// a size" and "18446744073709551615 is not a whole number"; and valueText
// echoes a float of 22 digits or more as 1e+21, not as written. Fix: a
// `case uint64:` in int and size (out of range / too large), and valueText
// formatting any integral float with 'f' (or keeping the YAML text).
func TestS25HugeWholeNumbersAreCalledTooLargeAsWritten(t *testing.T) {
	for body, want := range map[string]string{
		"cache: {max_bytes: 18446744073709551615}\n":       `"18446744073709551615" is too large`,
		"limits: {max_inflight: 18446744073709551615}\n":   `"18446744073709551615" is out of range`,
		"limits: {max_inflight: 1000000000000000000000}\n": `"1000000000000000000000" is out of range`,
	} {
		_, err := LoadBytes([]byte("origin: {url: http://127.0.0.1:9}\n" + body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v\n  want it to say %s", strings.TrimSpace(body), err, want)
		}
	}
}
