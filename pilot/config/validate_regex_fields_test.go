package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// holdsRegex reports whether f is a string field Envoy reads as a regex: a StringMatch's regex, a
// RegexRewrite's match, or any string field whose name says regex.
func holdsRegex(f protoreflect.FieldDescriptor) bool {
	if f.Kind() != protoreflect.StringKind {
		return false
	}
	msg, name := f.ContainingMessage().Name(), string(f.Name())
	return msg == "StringMatch" && name == "regex" || msg == "RegexRewrite" && name == "match" ||
		strings.Contains(strings.ToLower(name), "regex")
}

// regexSeeds give a message created on the way to a regex field what it needs to be valid otherwise.
var regexSeeds = map[protoreflect.FullName]func(protoreflect.Message){
	networkingPkg + "RegexRewrite": func(m protoreflect.Message) {
		m.Set(m.Descriptor().Fields().ByName("rewrite"), protoreflect.ValueOfString(`/\1`))
	},
}

func seedMessage(m protoreflect.Message) {
	if seed := regexSeeds[m.Descriptor().FullName()]; seed != nil {
		seed(m)
	}
}

// setRegex sets the string field at the end of chain to re, taking the first element of a list and the
// map entry "x-regex" on the way, creating (and seeding) what is missing.
func setRegex(m protoreflect.Message, chain []protoreflect.FieldDescriptor, re string) {
	for i, f := range chain {
		last := i == len(chain)-1
		switch {
		case f.IsList():
			l := m.Mutable(f).List()
			if last {
				l.Append(protoreflect.ValueOfString(re))
				return
			}
			if l.Len() == 0 {
				e := l.NewElement()
				seedMessage(e.Message())
				l.Append(e)
			}
			m = l.Get(0).Message()
		case f.IsMap():
			mp := m.Mutable(f).Map()
			key := protoreflect.ValueOfString("x-regex").MapKey()
			if last {
				mp.Set(key, protoreflect.ValueOfString(re))
				return
			}
			if !mp.Has(key) {
				seedMessage(mp.Mutable(key).Message())
			}
			m = mp.Mutable(key).Message()
		case f.Message() != nil:
			if !m.Has(f) {
				seedMessage(m.Mutable(f).Message())
			}
			m = m.Mutable(f).Message()
		default:
			m.Set(f, protoreflect.ValueOfString(re))
		}
	}
}

// Every field of the Istio kinds that holds a regex, found in the protos (so a regex field a new istio.io/api
// adds fails here until it is validated), refuses a regex Envoy's RE2 would not compile, naming the field.
func TestEveryRegexFieldIsValidated(t *testing.T) {
	bad := []string{`(?=admin).*`, `a{1001}`, `(`, strings.Repeat("a", maxRegexLen+1)}
	var found []string
	for _, k := range CompatKinds() {
		for _, r := range CompatRows(k.Spec) {
			if !holdsRegex(r.Field) {
				continue
			}
			found = append(found, r.Path)
			good := compatObject(t, k.Kind)
			setRegex(good.Spec.(interface{ ProtoReflect() protoreflect.Message }).ProtoReflect(), r.chain, `^/ok/([0-9]+)(/.*)?$`)
			if err := Validate(good); err != nil {
				t.Errorf("%s %s: refused with a valid regex (seed the message in regexSeeds): %v", k.Kind, r.Path, err)
				continue
			}
			for _, re := range bad {
				c := compatObject(t, k.Kind)
				setRegex(c.Spec.(interface{ ProtoReflect() protoreflect.Message }).ProtoReflect(), r.chain, re)
				var fe *FieldError
				if err := Validate(c); !errors.As(err, &fe) || stripIndices(fe.Field) != r.Path {
					t.Errorf("%s %s: regex %.20q accepted or refused elsewhere: %v", k.Kind, r.Path, re, err)
				}
			}
		}
	}
	// The walk must reach the fields known today; more is fine.
	for _, p := range []string{"spec.http[].match[].uri.regex", "spec.http[].match[].headers[].regex",
		"spec.http[].match[].withoutHeaders[].regex", "spec.http[].match[].queryParams[].regex",
		"spec.http[].corsPolicy.allowOrigins[].regex", "spec.http[].rewrite.uriRegexRewrite.match"} {
		if !slices.Contains(found, p) {
			t.Errorf("regex field %s not found in the protos; found %v", p, found)
		}
	}
}
