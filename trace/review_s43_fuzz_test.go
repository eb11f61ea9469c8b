package trace

// Review s43: a fuzz target with properties, not only "no panic" (the
// existing FuzzReader checks nothing but that). PINS properties that hold
// (no failure in a 45 s run on this machine):
//   - text formats: every error names a line that exists ("line N", N ≤
//     the input's line count), reading goes on after it, and every
//     non-blank, non-comment line (or line with a NUL) yields exactly one request or one error
//     (nothing lost, nothing invented);
//   - binary formats, uncompressed input (not starting with a gzip or xz
//     magic): exactly len/width keys, then an error naming entry
//     len/width+1 if bytes are left over, else EOF.

import (
	"bytes"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var s43LineRE = regexp.MustCompile(`^trace: (line|entry) (\d+): `)

func FuzzS43Reader(f *testing.F) {
	f.Add([]byte("1 2 3\r\n# c\n\nx\n4 5 -6\n7 8 9"), uint8(2))
	f.Add([]byte("/a\n\x00\n/b"), uint8(3))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 2}, uint8(0))
	f.Add([]byte{0, 0, 0, 1, 2}, uint8(1))
	formats := []Format{Int64BE, Int32BE, AdaptSize, Lines}
	f.Fuzz(func(t *testing.T, data []byte, which uint8) {
		format := formats[int(which)%len(formats)]
		compressed := bytes.HasPrefix(data, gzipMagic) || bytes.HasPrefix(data, xzMagic)
		r, err := NewReader(bytes.NewReader(data), format)
		if err != nil {
			if !compressed {
				t.Fatalf("NewReader refused uncompressed input: %v", err)
			}
			return
		}
		keys, errs := 0, 0
		for range 100000 {
			_, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				if compressed {
					return
				}
				m := s43LineRE.FindStringSubmatch(err.Error())
				if m == nil {
					t.Fatalf("error names no line or entry: %v", err)
				}
				n, _ := strconv.Atoi(m[2])
				if format == Int64BE || format == Int32BE {
					if m[1] != "entry" {
						t.Fatalf("binary error: %v", err)
					}
					w := map[Format]int{Int64BE: 8, Int32BE: 4}[format]
					if keys != len(data)/w || n != keys+1 || len(data)%w == 0 {
						t.Fatalf("binary: %d keys of %d bytes, error %v", keys, len(data), err)
					}
					return
				}
				if m[1] != "line" || n < 1 || n > strings.Count(string(data), "\n")+1 {
					t.Fatalf("error names line %d of %d: %v", n, strings.Count(string(data), "\n")+1, err)
				}
				errs++
				continue
			}
			keys++
		}
		if compressed {
			return
		}
		switch format {
		case Int64BE, Int32BE:
			w := map[Format]int{Int64BE: 8, Int32BE: 4}[format]
			if keys != len(data)/w || len(data)%w != 0 {
				t.Fatalf("binary: %d keys from %d bytes and no error", keys, len(data))
			}
		default:
			want := 0
			for _, l := range strings.Split(string(data), "\n") {
				if l = strings.TrimSpace(l); strings.IndexByte(l, 0) >= 0 || l != "" && l[0] != '#' {
					want++
				}
			}
			if keys+errs != want {
				t.Fatalf("%d keys + %d errors from %d entry lines", keys, errs, want)
			}
		}
	})
}
