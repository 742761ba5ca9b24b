package loglimit

import (
	"strconv"
	"unicode/utf8"
)

// MaxText is how much of a string a client chose (node id, user agent) goes into a log line or an error: a
// client may send a node id of megabytes, logged on every connect and disconnect.
const MaxText = 256

// Text returns s cut to MaxText bytes, saying how long it was.
func Text(s string) string { return Cut(s, MaxText) }

// Cut returns s cut to n bytes (at a rune boundary), saying how long it was.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
