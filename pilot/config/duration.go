package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// normalizeDurations rewrites, in the JSON of a spec of message md, every google.protobuf.Duration given in
// Go's form ("1m", "1h30m", "500ms") into the seconds form protojson reads ("60s"). Istio decodes specs with
// golang/protobuf's jsonpb, which takes any time.ParseDuration string, and the CRD schema's duration() does
// too, so the same YAML loads from a cluster, from istioctl and from Sextant's files. Only those strings are
// replaced, in place, so every other byte (and so every error position protojson reports) is unchanged;
// a string ParseDuration rejects is left for protojson to report.
func normalizeDurations(spec []byte, md protoreflect.MessageDescriptor) []byte {
	var edits []durationEdit
	dec := json.NewDecoder(bytes.NewReader(spec))
	dec.UseNumber()
	w := durationWalker{dec: dec, data: spec}
	if err := w.value(md, &edits); err != nil || len(edits) == 0 {
		return spec // malformed JSON: protojson reports it with its position
	}
	var out bytes.Buffer
	last := 0
	for _, e := range edits {
		out.Write(spec[last:e.start])
		out.WriteString(strconv.Quote(e.repl))
		last = e.end
	}
	out.Write(spec[last:])
	return out.Bytes()
}

type durationEdit struct {
	start, end int // byte range of the JSON string, quotes included
	repl       string
}

type durationWalker struct {
	dec  *json.Decoder
	data []byte
}

var errNotJSON = errors.New("unexpected JSON token")

// value reads one JSON value; md is the message it decodes into, or nil when no Duration can lie below it.
func (w *durationWalker) value(md protoreflect.MessageDescriptor, edits *[]durationEdit) error {
	before := int(w.dec.InputOffset())
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	if md != nil && md.FullName() == "google.protobuf.Duration" {
		if s, ok := tok.(string); ok {
			if repl, ok := secondsForm(s); ok && repl != s {
				end := int(w.dec.InputOffset())
				start := before
				for start < end && w.data[start] != '"' {
					start++ // skip the ':' or ',' and blanks between the previous token and this string
				}
				*edits = append(*edits, durationEdit{start: start, end: end, repl: repl})
			}
			return nil
		}
	}
	if md != nil && strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		md = nil // Struct, Value, Any, wrappers: nothing below them is a Duration of the spec
	}
	switch tok {
	case json.Delim('{'):
		for w.dec.More() {
			kt, err := w.dec.Token()
			if err != nil {
				return err
			}
			key, ok := kt.(string)
			if !ok {
				return errNotJSON
			}
			var fd protoreflect.FieldDescriptor
			if md != nil {
				if fd = md.Fields().ByJSONName(key); fd == nil {
					fd = md.Fields().ByTextName(key)
				}
			}
			if err := w.field(fd, edits); err != nil {
				return err
			}
		}
		_, err = w.dec.Token() // '}'
		return err
	case json.Delim('['):
		for w.dec.More() {
			if err := w.value(md, edits); err != nil {
				return err
			}
		}
		_, err = w.dec.Token() // ']'
		return err
	}
	return nil // a scalar
}

// field reads the value of field fd (nil: a field the message does not have, skipped).
func (w *durationWalker) field(fd protoreflect.FieldDescriptor, edits *[]durationEdit) error {
	switch {
	case fd == nil:
		return w.value(nil, edits)
	case fd.IsMap():
		v := fd.MapValue()
		if v.Message() == nil {
			return w.value(nil, edits)
		}
		tok, err := w.dec.Token()
		if err != nil {
			return err
		}
		if tok != json.Delim('{') {
			return nil // not an object: protojson reports it
		}
		for w.dec.More() {
			if _, err := w.dec.Token(); err != nil { // the key
				return err
			}
			if err := w.value(v.Message(), edits); err != nil {
				return err
			}
		}
		_, err = w.dec.Token()
		return err
	default:
		// A list walks each element with the element's message; value handles '[' with md unchanged.
		return w.value(fd.Message(), edits)
	}
}

// secondsForm turns a duration time.ParseDuration accepts into protojson's "<seconds>[.<fraction>]s".
func secondsForm(s string) (string, bool) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return "", false
	}
	neg := d < 0
	if neg {
		d = -d
	}
	sec, nsec := int64(d/time.Second), int64(d%time.Second)
	out := strconv.FormatInt(sec, 10)
	if nsec != 0 {
		frac := strings.TrimRight(strconv.FormatInt(nsec+1e9, 10)[1:], "0")
		out += "." + frac
	}
	if neg {
		out = "-" + out
	}
	return out + "s", true
}
