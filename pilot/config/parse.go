package config

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	security "istio.io/api/security/v1beta1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Error is a rejected document. It names the file, the document's index in it, the object where known,
// and the field at fault.
type Error struct {
	File  string `json:"file,omitempty"`
	Index int    `json:"index"` // 0-based position of the document in the file
	Kind  string `json:"kind,omitempty"`
	// Namespace and Name are empty when the document did not get far enough to tell.
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Field     string `json:"field,omitempty"`
	Message   string `json:"message"`
	// NotConfig marks input that cannot hold config at all (a FIFO or a device where a file was expected):
	// reported, but nothing is missing because of it.
	NotConfig bool `json:"notConfig,omitempty"`
	// Warning marks an accepted object with a field Sextant does not implement: it is served, without that field.
	Warning bool `json:"warning,omitempty"`
}

// ObjectWarnings returns Warnings(c) as errors marked Warning, labelled with file and index like Parse's errors.
func ObjectWarnings(c *Config, file string, index int) []*Error {
	var out []*Error
	for _, w := range Warnings(c) {
		out = append(out, &Error{File: file, Index: index, Kind: string(c.Kind), Namespace: c.Namespace, Name: c.Name,
			Field: w.Field, Message: w.Message, Warning: true})
	}
	return out
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		fmt.Fprintf(&b, "%s: document %d", e.File, e.Index)
	} else {
		fmt.Fprintf(&b, "document %d", e.Index)
	}
	if e.Kind != "" || e.Name != "" {
		b.WriteString(" (")
		b.WriteString(e.Kind)
		if e.Name != "" {
			b.WriteString(" ")
			if e.Namespace != "" {
				b.WriteString(e.Namespace + "/")
			}
			b.WriteString(e.Name)
		}
		b.WriteString(")")
	}
	if e.Field != "" {
		b.WriteString(": field " + e.Field)
	}
	b.WriteString(": " + e.Message)
	return b.String()
}

// SplitDocuments splits a multi-document YAML (or a single JSON document) into documents. Empty and
// comment-only documents are kept, so a document's index is its position in the file and errors can name it;
// callers skip them with IsEmptyDocument.
func SplitDocuments(data []byte) ([][]byte, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := reader.Read()
		if err == io.EOF {
			return docs, nil
		}
		if err != nil {
			return docs, err
		}
		// The reader skips an empty document between two separators and hands the second separator over
		// as the first line of the next document. Put the empty document back so later positions stay right.
		// (A separator on the first line of the file only opens the first document.)
		if len(docs) > 0 && bytes.HasPrefix(doc, []byte(yamlSeparator)) {
			docs = append(docs, nil)
		}
		docs = append(docs, doc)
	}
}

const yamlSeparator = "---"

// IsEmptyDocument reports whether a document holds nothing but comments and whitespace.
func IsEmptyDocument(doc []byte) bool {
	for line := range bytes.SplitSeq(doc, []byte("\n")) {
		t := bytes.TrimSpace(line)
		if len(t) == 0 || t[0] == '#' || string(t) == "---" {
			continue
		}
		return false
	}
	return true
}

type envelope struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
}

// istioDocument is the strict shape of an Istio CRD document; spec is decoded with protojson.
type istioDocument struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       jsonRaw           `json:"spec"`
	Status     jsonRaw           `json:"status,omitempty"`
}

type jsonRaw []byte

func (r *jsonRaw) UnmarshalJSON(b []byte) error { *r = append((*r)[:0], b...); return nil }

// Parse decodes and validates one YAML or JSON document. file and index only label errors and Source.
// A namespaced object without a namespace gets defaultNamespace, as kubectl does.
func Parse(doc []byte, file string, index int, defaultNamespace string) (*Config, error) {
	fail := func(env *envelope, field, format string, args ...any) *Error {
		e := &Error{File: file, Index: index, Field: field, Message: fmt.Sprintf(format, args...)}
		if env != nil {
			e.Kind, e.Namespace, e.Name = env.Kind, env.Metadata.Namespace, env.Metadata.Name
		}
		return e
	}
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, fail(nil, "", "not valid YAML: %v", cleanYAMLError(err))
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return nil, fail(nil, "", "empty document")
	}
	var env envelope
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &env); err != nil {
		// Recover what we can for the message: the document may still have a kind and name.
		var loose struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name, Namespace string
			} `json:"metadata"`
		}
		_ = sigsjson.UnmarshalCaseSensitivePreserveInts(js, &loose)
		e := fail(nil, jsonErrorField(err), "%s", jsonErrorMessage(err))
		e.Kind, e.Name, e.Namespace = loose.Kind, loose.Metadata.Name, loose.Metadata.Namespace
		return nil, e
	}
	if env.Kind == "" {
		return nil, fail(&env, "kind", "missing")
	}
	if env.APIVersion == "" {
		return nil, fail(&env, "apiVersion", "missing")
	}
	info, err := LookupKind(env.APIVersion, env.Kind)
	if err != nil {
		field := "kind"
		if _, known := Info(Kind(env.Kind)); known {
			field = "apiVersion" // the kind is fine; its apiVersion is not
		}
		return nil, fail(&env, field, "%v", err)
	}
	if env.Metadata.Name == "" {
		return nil, fail(&env, "metadata.name", "missing")
	}
	if errs := validation.IsDNS1123Subdomain(env.Metadata.Name); len(errs) > 0 {
		return nil, fail(&env, "metadata.name", "%q is invalid: %s", env.Metadata.Name, strings.Join(errs, "; "))
	}
	if info.Namespaced {
		if env.Metadata.Namespace == "" {
			env.Metadata.Namespace = defaultNamespace
		}
		if errs := validation.IsDNS1123Label(env.Metadata.Namespace); len(errs) > 0 {
			return nil, fail(&env, "metadata.namespace", "%q is invalid: %s", env.Metadata.Namespace, strings.Join(errs, "; "))
		}
	} else if env.Metadata.Namespace != "" {
		env.Metadata.Namespace = "" // kubectl ignores a namespace on cluster-scoped objects
	}

	var spec any
	if info.Builtin() {
		obj := newKubeObject(info.Kind)
		strict, err := sigsjson.UnmarshalStrict(js, obj)
		if err != nil {
			return nil, fail(&env, jsonErrorField(err), "%s", jsonErrorMessage(err))
		}
		if len(strict) > 0 {
			return nil, fail(&env, jsonErrorField(strict[0]), "%s", jsonErrorMessage(strict[0]))
		}
		meta := objectMeta(obj)
		meta.Namespace = env.Metadata.Namespace
		if s, ok := obj.(*corev1.Secret); ok {
			mergeStringData(s)
		}
		spec = obj
	} else {
		var d istioDocument
		strict, err := sigsjson.UnmarshalStrict(js, &d)
		if err != nil {
			return nil, fail(&env, jsonErrorField(err), "%s", jsonErrorMessage(err))
		}
		if len(strict) > 0 {
			return nil, fail(&env, jsonErrorField(strict[0]), "%s", jsonErrorMessage(strict[0]))
		}
		msg := NewIstioSpec(info.Kind)
		if len(d.Spec) > 0 && string(d.Spec) != "null" {
			js := normalizeDurations(d.Spec, msg.ProtoReflect().Descriptor())
			if err := protojson.Unmarshal(js, msg); err != nil {
				field, m := protoErrorFieldAndMessage(err, js)
				return nil, fail(&env, "spec"+field, "%s", m)
			}
		}
		spec = msg
	}
	cfg := &Config{
		Key:               Key{Kind: info.Kind, Namespace: env.Metadata.Namespace, Name: env.Metadata.Name},
		Labels:            env.Metadata.Labels,
		Annotations:       env.Metadata.Annotations,
		ResourceVersion:   env.Metadata.ResourceVersion,
		Generation:        env.Metadata.Generation,
		CreationTimestamp: env.Metadata.CreationTimestamp.Time,
		UID:               string(env.Metadata.UID),
		Source:            fmt.Sprintf("file:%s#%d", file, index),
		Spec:              spec,
	}
	if HasConditions(info.Kind) {
		cfg.Conditions = parseIstioConditions(istioStatus(js))
	}
	if err := Validate(cfg); err != nil {
		e := fail(&env, "", "%v", err)
		if fe, ok := err.(*FieldError); ok {
			e.Field, e.Message = fe.Field, fe.Message
		}
		return nil, e
	}
	return cfg, nil
}

// mergeStringData does what the API server does on write: stringData entries are written into data, over
// an entry of the same key. A file Secret then reads as the same Secret applied to a cluster.
func mergeStringData(s *corev1.Secret) {
	if len(s.StringData) == 0 {
		return
	}
	if s.Data == nil {
		s.Data = make(map[string][]byte, len(s.StringData))
	}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
}

func newKubeObject(k Kind) any {
	switch k {
	case Namespace:
		return &corev1.Namespace{}
	case Service:
		return &corev1.Service{}
	case Pod:
		return &corev1.Pod{}
	case Node:
		return &corev1.Node{}
	case EndpointSlice:
		return &discoveryv1.EndpointSlice{}
	case Secret:
		return &corev1.Secret{}
	case Ingress:
		return &networkingv1.Ingress{}
	case IngressClass:
		return &networkingv1.IngressClass{}
	}
	panic("not a Kubernetes core kind: " + k)
}

func objectMeta(obj any) *metav1.ObjectMeta {
	switch o := obj.(type) {
	case *corev1.Namespace:
		return &o.ObjectMeta
	case *corev1.Service:
		return &o.ObjectMeta
	case *corev1.Pod:
		return &o.ObjectMeta
	case *corev1.Node:
		return &o.ObjectMeta
	case *discoveryv1.EndpointSlice:
		return &o.ObjectMeta
	case *corev1.Secret:
		return &o.ObjectMeta
	case *networkingv1.Ingress:
		return &o.ObjectMeta
	case *networkingv1.IngressClass:
		return &o.ObjectMeta
	}
	panic(fmt.Sprintf("no metadata for %T", obj))
}

// NewIstioSpec returns an empty istio.io/api message for an Istio kind.
func NewIstioSpec(k Kind) proto.Message {
	switch k {
	case ServiceEntry:
		return &networking.ServiceEntry{}
	case WorkloadEntry:
		return &networking.WorkloadEntry{}
	case DestinationRule:
		return &networking.DestinationRule{}
	case VirtualService:
		return &networking.VirtualService{}
	case Gateway:
		return &networking.Gateway{}
	case Sidecar:
		return &networking.Sidecar{}
	case AuthorizationPolicy:
		return &security.AuthorizationPolicy{}
	case PeerAuthentication:
		return &security.PeerAuthentication{}
	case RequestAuthentication:
		return &security.RequestAuthentication{}
	case ProxyConfig:
		return &networkingv1beta1.ProxyConfig{}
	case WorkloadGroup:
		return &networking.WorkloadGroup{}
	}
	panic("not an Istio kind: " + k)
}

var unknownFieldRE = regexp.MustCompile(`unknown field "([^"]+)"`)
var duplicateFieldRE = regexp.MustCompile(`duplicate field "([^"]+)"`)
var goStructFieldRE = regexp.MustCompile(`Go struct field \S+?\.([\w.\[\]]+) of type (\S+)`)

func jsonErrorField(err error) string {
	s := err.Error()
	if m := unknownFieldRE.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	if m := duplicateFieldRE.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	if m := goStructFieldRE.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return ""
}

func jsonErrorMessage(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "json: ")
	switch {
	case unknownFieldRE.MatchString(s):
		return "unknown field"
	case duplicateFieldRE.MatchString(s):
		return "duplicate field"
	}
	if m := goStructFieldRE.FindStringSubmatch(s); m != nil {
		if i := strings.Index(s, " into Go struct field"); i > 0 {
			return s[:i] + " (want " + m[2] + ")"
		}
	}
	return s
}

var protoFieldRE = regexp.MustCompile(`(?:unknown field|field|for \w+ field|for enum field) "?([\w]+)"?`)

// protoLineCol finds the position protojson reports, either "proto: (line L:C): ..." or "proto: syntax error (line L:C): ...".
var protoLineCol = regexp.MustCompile(`\(line (\d+):(\d+)\):\s*`)

// protoErrorFieldAndMessage turns a protojson error for spec into a field path below spec (".http[0].route[0].weight")
// and a message. The position protojson reports is in the JSON converted from the document, which the user never
// saw, so it is turned into the path of the value at that position and dropped from the message.
func protoErrorFieldAndMessage(err error, spec []byte) (string, string) {
	// protojson separates "proto:" with a space or, at random per binary, a non-breaking space.
	raw := strings.TrimLeftFunc(strings.TrimPrefix(err.Error(), "proto:"), unicode.IsSpace)
	field := ""
	if m := protoLineCol.FindStringSubmatch(raw); m != nil {
		line, _ := strconv.Atoi(m[1])
		col, _ := strconv.Atoi(m[2])
		field = jsonPathAt(spec, jsonOffset(spec, line, col))
	}
	msg := strings.TrimSpace(protoLineCol.ReplaceAllString(raw, ""))
	if rest, ok := strings.CutPrefix(msg, "syntax error"); ok {
		// A value of the wrong shape (a number where a list belongs) surfaces as a JSON syntax error.
		msg = "wrong type: " + strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest), ":"))
	}
	if field == "" {
		if m := protoFieldRE.FindStringSubmatch(msg); m != nil {
			field = "." + m[1]
		}
	}
	return field, msg
}

// jsonOffset converts protojson's 1-based line and rune column into a byte offset in data.
func jsonOffset(data []byte, line, col int) int {
	off := 0
	for ; line > 1 && off < len(data); off++ {
		if data[off] == '\n' {
			line--
		}
	}
	for ; col > 1 && off < len(data); col-- {
		_, n := utf8.DecodeRune(data[off:])
		off += n
	}
	return off
}

// jsonPathAt returns the path, like ".http[0].route[1].weight", of the key or value at byte offset off in the
// well-formed JSON data.
func jsonPathAt(data []byte, off int) string {
	type frame struct {
		array   bool
		index   int
		key     string
		inValue bool // object: the key has been read, the value has not ended
	}
	var stack []frame
	readString := func(i int) (string, int) { // data[i] == '"'; returns the string and the index of the closing quote
		j := i + 1
		for j < len(data) && data[j] != '"' {
			if data[j] == '\\' {
				j++
			}
			j++
		}
		var s string
		if j < len(data) {
			_ = json.Unmarshal(data[i:j+1], &s)
		}
		return s, j
	}
	for i := 0; i <= off && i < len(data); i++ {
		top := len(stack) - 1
		switch data[i] {
		case '{':
			if i < off {
				stack = append(stack, frame{})
			}
		case '[':
			if i < off {
				stack = append(stack, frame{array: true})
			}
		case '}', ']':
			if i < off && top >= 0 {
				stack = stack[:top]
			}
		case ':':
			if top >= 0 {
				stack[top].inValue = true
			}
		case ',':
			if top >= 0 {
				if stack[top].array {
					stack[top].index++
				} else {
					stack[top].key, stack[top].inValue = "", false
				}
			}
		case '"':
			s, end := readString(i)
			if top >= 0 && !stack[top].array && !stack[top].inValue {
				stack[top].key = s
			}
			if end >= off {
				i = off
			} else {
				i = end
			}
		}
	}
	var b strings.Builder
	for _, f := range stack {
		switch {
		case f.array:
			fmt.Fprintf(&b, "[%d]", f.index)
		case f.key != "":
			b.WriteString("." + f.key)
		}
	}
	return b.String()
}

func cleanYAMLError(err error) string {
	return strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
}
