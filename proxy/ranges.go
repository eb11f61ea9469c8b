package proxy

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
)

// rangeGap is the distance below which two ranges are merged: a multipart
// part costs about this much in headers, so sending the gap is cheaper.
const rangeGap = 80

// limitRanges defends against Range amplification (RFC 9110 §14.2 lets a
// server coalesce ranges or ignore the field): it resolves a bytes range
// set against size, merges overlapping and nearby ranges, and reports
// false when more than maxRanges remain (the caller then sends the whole
// representation, never more bytes than it has). A set it cannot parse
// comes back as it was, for http.ServeContent to answer (416 or the whole
// body); one with nothing satisfiable (or no range at all) becomes one
// ServeContent answers 416.
func limitRanges(spec string, size int64, maxRanges int) (string, bool) {
	unit, set, ok := strings.Cut(spec, "=")
	if !ok || !strings.EqualFold(strings.TrimSpace(unit), "bytes") || size <= 0 {
		return spec, true
	}
	type span struct{ start, end int64 } // inclusive
	var spans []span
	for part := range strings.SplitSeq(set, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		first, last, ok := strings.Cut(part, "-")
		if !ok {
			return spec, true
		}
		first, last = strings.TrimSpace(first), strings.TrimSpace(last)
		var s span
		if first == "" {
			n, err := parsePos(last)
			if err != nil || n < 0 {
				return spec, true
			}
			if n == 0 {
				continue // unsatisfiable
			}
			s = span{max(size-n, 0), size - 1}
		} else {
			a, err := parsePos(first)
			if err != nil || a < 0 {
				return spec, true
			}
			b := size - 1
			if last != "" {
				if b, err = parsePos(last); err != nil || b < a {
					return spec, true
				}
				b = min(b, size-1)
			}
			if a >= size {
				continue // unsatisfiable
			}
			s = span{a, b}
		}
		spans = append(spans, s)
	}
	if len(spans) == 0 {
		// Every range unsatisfiable (past the end, a suffix of zero):
		// one that http.ServeContent answers 416 with "bytes */size"
		// (it sent "bytes=-0" a 206 whose last byte came before its
		// first, a review's TestS8RRangeSpecEdges).
		return "bytes=" + strconv.FormatInt(size, 10) + "-", true
	}
	slices.SortFunc(spans, func(x, y span) int { return int(min(max(x.start-y.start, -1), 1)) })
	merged := spans[:1]
	for _, s := range spans[1:] {
		last := &merged[len(merged)-1]
		if s.start <= last.end+rangeGap {
			last.end = max(last.end, s.end)
			continue
		}
		merged = append(merged, s)
	}
	if len(merged) > maxRanges {
		return "", false
	}
	var b strings.Builder
	b.WriteString("bytes=")
	for i, s := range merged {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(s.start, 10))
		b.WriteByte('-')
		b.WriteString(strconv.FormatInt(s.end, 10))
	}
	return b.String(), true
}

// parsePos reads a byte position of a range. One of digits too large for
// an int64 is past any body (RFC 9110 §14.1.2: a last-pos beyond the end
// means the rest), not an error.
func parsePos(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) && s != "" && strings.Trim(s, "0123456789") == "" {
		return math.MaxInt64, nil
	}
	return n, err
}
