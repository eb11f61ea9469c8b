package proxy

import (
	"strings"
	"time"
)

// parseHTTPDate parses an HTTP-date exactly as RFC 9110 §5.6.7 defines
// it: IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), or the obsolete
// rfc850-date ("Sunday, 06-Nov-94 08:49:37 GMT") and asctime-date
// ("Sun Nov  6 08:49:37 1994") that a recipient must also accept. Names are
// case-sensitive, widths and single spaces are fixed, and the fields must
// be in range; anything else is not a date (ok is false). net/http's
// ParseTime is more lenient (one-digit hours, lower-case names), and RFC
// 9111 §5.3 says an Expires that fails the grammar means "already expired",
// so the lenient reading would keep responses fresh that the origin meant
// to expire.
func parseHTTPDate(s string) (time.Time, bool) {
	s = strings.Trim(s, " \t") // field values arrive without OWS; be safe
	switch {
	case len(s) == 29 && s[3] == ',':
		return parseIMFFixdate(s)
	case len(s) == 24 && s[3] == ' ':
		return parseASCTime(s)
	case strings.IndexByte(s, ',') > 3:
		return parseRFC850(s)
	}
	return time.Time{}, false
}

var dayNames = [...]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
var longDayNames = [...]string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
var monthNames = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

// "Sun, 06 Nov 1994 08:49:37 GMT"
func parseIMFFixdate(s string) (time.Time, bool) {
	if !isName(s[0:3], dayNames[:]) || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' || s[25:] != " GMT" {
		return time.Time{}, false
	}
	day, ok1 := digits(s[5:7])
	mon := month(s[8:11])
	year, ok2 := digits(s[12:16])
	if !ok1 || !ok2 || mon == 0 {
		return time.Time{}, false
	}
	return build(year, mon, day, s[17:25])
}

// "Sunday, 06-Nov-94 08:49:37 GMT"
func parseRFC850(s string) (time.Time, bool) {
	name, rest, _ := strings.Cut(s, ",")
	if !isName(name, longDayNames[:]) || len(rest) != 23 || rest[0] != ' ' || rest[3] != '-' || rest[7] != '-' || rest[10] != ' ' || rest[19:] != " GMT" {
		return time.Time{}, false
	}
	day, ok1 := digits(rest[1:3])
	mon := month(rest[4:7])
	yy, ok2 := digits(rest[8:10])
	if !ok1 || !ok2 || mon == 0 {
		return time.Time{}, false
	}
	// RFC 9110 §5.6.7: a two-digit year more than 50 years in the future is
	// in the past century.
	year := 2000 + yy
	if year > time.Now().Year()+50 {
		year -= 100
	}
	return build(year, mon, day, rest[11:19])
}

// "Sun Nov  6 08:49:37 1994" (a one-digit day is padded with a space)
func parseASCTime(s string) (time.Time, bool) {
	if !isName(s[0:3], dayNames[:]) || s[7] != ' ' || s[10] != ' ' || s[19] != ' ' {
		return time.Time{}, false
	}
	mon := month(s[4:7])
	dd := s[8:10]
	switch dd[0] {
	case ' ':
		dd = "0" + dd[1:]
	case '0':
		return time.Time{}, false // the grammar pads with a space, not a zero
	}
	day, ok1 := digits(dd)
	year, ok2 := digits(s[20:24])
	if !ok1 || !ok2 || mon == 0 {
		return time.Time{}, false
	}
	return build(year, mon, day, s[11:19])
}

// build checks "HH:MM:SS" and the ranges, and makes the time.
func build(year int, mon time.Month, day int, hms string) (time.Time, bool) {
	if hms[2] != ':' || hms[5] != ':' {
		return time.Time{}, false
	}
	hh, ok1 := digits(hms[0:2])
	mm, ok2 := digits(hms[3:5])
	ss, ok3 := digits(hms[6:8])
	if !ok1 || !ok2 || !ok3 || hh > 23 || mm > 59 || ss > 60 || day < 1 {
		return time.Time{}, false
	}
	t := time.Date(year, mon, day, hh, mm, min(ss, 59), 0, time.UTC) // a leap second reads as :59
	if t.Day() != day {
		return time.Time{}, false // 31 Feb and the like
	}
	return t, true
}

func isName(s string, names []string) bool {
	for _, n := range names {
		if s == n {
			return true
		}
	}
	return false
}

func month(s string) time.Month {
	for i, n := range monthNames {
		if s == n {
			return time.Month(i + 1)
		}
	}
	return 0
}

func digits(s string) (int, bool) {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, len(s) > 0
}
