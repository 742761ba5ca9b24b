package config

import (
	"errors"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

var update = flag.Bool("update", false, "rewrite docs/istio-compat.md")

const compatPagePath = "../../docs/istio-compat.md"

// The page is the rendering of the protos and the table, so it cannot drift from the code.
func TestCompatPage(t *testing.T) {
	want := CompatPage()
	if *update {
		if err := os.WriteFile(compatPagePath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(compatPagePath)
	if err != nil {
		t.Fatalf("%v (run go test ./pilot/config -run TestCompatPage -update)", err)
	}
	if string(got) != want {
		t.Errorf("%s is not the rendering of pilot/config/compat.go: run go test ./pilot/config -run TestCompatPage -update", compatPagePath)
	}
}

// allCompatRows returns the rows of every kind, with the kind.
func allCompatRows() map[Kind][]CompatRow {
	out := map[Kind][]CompatRow{}
	for _, k := range CompatKinds() {
		out[k.Kind] = CompatRows(k.Spec)
	}
	return out
}

// Every table entry names a field that exists and that some kind reaches, with a consistent entry.
func TestCompatTableNamesFields(t *testing.T) {
	reached := map[CompatField]bool{}
	for _, rows := range allCompatRows() {
		for _, r := range rows {
			reached[CompatField{r.Field.ContainingMessage().FullName(), r.Field.Name()}] = true
		}
	}
	for _, r := range CompatMeshRows() {
		reached[CompatField{r.Field.ContainingMessage().FullName(), r.Field.Name()}] = true
	}
	entries := maps.Clone(compatTable)
	maps.Copy(entries, meshCompatTable)
	for key, e := range entries {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(key.Message)
		if err != nil {
			t.Errorf("%s: no such message", key.Message)
			continue
		}
		m, ok := d.(protoreflect.MessageDescriptor)
		if !ok {
			t.Errorf("%s is not a message", key.Message)
			continue
		}
		f := m.Fields().ByName(key.Field)
		if f == nil {
			t.Errorf("%s has no field %s", key.Message, key.Field)
			continue
		}
		if !reached[key] {
			t.Errorf("%s.%s is in no kind Sextant reads", key.Message, key.Field)
		}
		if e.Note == "" && e.ReadBy == "" {
			t.Errorf("%s.%s: no note", key.Message, key.Field)
		}
		if e.ReadBy != "" && e.Status != Honoured {
			t.Errorf("%s.%s: ReadBy is for honoured fields", key.Message, key.Field)
		}
		if e.Status == Partly && len(e.Values) == 0 && f.Kind() == protoreflect.EnumKind {
			t.Errorf("%s.%s: a partly honoured enum names its warned values", key.Message, key.Field)
		}
		for _, v := range e.Values {
			if f.Kind() != protoreflect.EnumKind || f.Enum().Values().ByName(protoreflect.Name(v)) == nil {
				t.Errorf("%s.%s: %q is not a value of the field", key.Message, key.Field, v)
			}
		}
	}
}

// goCamelCase is protoc-gen-go's Go name of a field (google.golang.org/protobuf/internal/strs.GoCamelCase):
// consecutive_5xx_errors is Consecutive_5XxErrors.
func goCamelCase(s string) string {
	isLower := func(c byte) bool { return 'a' <= c && c <= 'z' }
	var b []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.' && i+1 < len(s) && isLower(s[i+1]):
		case c == '.':
			b = append(b, '_')
		case c == '_' && (i == 0 || s[i-1] == '.'):
			b = append(b, 'X')
		case c == '_' && i+1 < len(s) && isLower(s[i+1]):
		case '0' <= c && c <= '9':
			b = append(b, c)
		default:
			if isLower(c) {
				c -= 'a' - 'A'
			}
			b = append(b, c)
			for ; i+1 < len(s) && isLower(s[i+1]); i++ {
				b = append(b, s[i+1])
			}
		}
	}
	return string(b)
}

var protobufTagName = regexp.MustCompile(`(?:^|,)name=([^,]+)`)

// goFieldName is the Go name of f: from the generated struct's tags, or for a oneof member (whose field is
// in a wrapper type) by protoc-gen-go's rule, which the tags confirm for every other field.
func goFieldName(t *testing.T, f protoreflect.FieldDescriptor) string {
	t.Helper()
	mt, err := protoregistry.GlobalTypes.FindMessageByName(f.ContainingMessage().FullName())
	if err != nil {
		t.Fatalf("%s: %v", f.ContainingMessage().FullName(), err)
	}
	st := reflect.TypeOf(mt.New().Interface()).Elem()
	for i := range st.NumField() {
		sf := st.Field(i)
		if m := protobufTagName.FindStringSubmatch(sf.Tag.Get("protobuf")); m != nil && m[1] == string(f.Name()) {
			if camel := goCamelCase(string(f.Name())); camel != sf.Name {
				t.Errorf("goCamelCase(%s) = %s, the generated field is %s", f.Name(), camel, sf.Name)
			}
			return sf.Name
		}
	}
	if f.ContainingOneof() == nil {
		t.Errorf("%s: no Go field", f.FullName())
	}
	return goCamelCase(string(f.Name()))
}

// The packages that turn config into what proxies receive; their subpackages are read too, so
// splitting a generator package keeps its field reads visible here.
var generatorPackages = []string{"../model", "../envoy", "../ztunnel", "../push", "../jwks", "../discovery", "../autoregister"}

// goFilesUnder returns the Go files of dir and of its subdirectories, testdata aside.
func goFilesUnder(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			files = append(files, path)
		}
		return nil
	})
	return files, err
}

// selectorNames returns every name used after a dot in the non-test Go files under dirs.
func selectorNames(t *testing.T, dirs []string, keep func(file string) bool) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		files, err := goFilesUnder(dir)
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", dir, err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") || !keep(file) {
				continue
			}
			f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if s, ok := n.(*ast.SelectorExpr); ok {
					names[s.Sel.Name] = true
				}
				return true
			})
		}
	}
	return names
}

// funcSelectorNames returns the names used after a dot in the body of function name of this package.
func funcSelectorNames(t *testing.T, name string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	files, _ := filepath.Glob("*.go")
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Name.Name != name {
				continue
			}
			names := map[string]bool{}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if s, ok := n.(*ast.SelectorExpr); ok {
					names[s.Sel.Name] = true
				}
				return true
			})
			// One level of calls within the package: IsGatewayTargetRef reads the group through a helper.
			for _, other := range f.Decls {
				if od, ok := other.(*ast.FuncDecl); ok && od.Recv == nil && od.Name.Name != name && callsFunc(fd, od.Name.Name) {
					ast.Inspect(od.Body, func(n ast.Node) bool {
						if s, ok := n.(*ast.SelectorExpr); ok {
							names[s.Sel.Name] = true
						}
						return true
					})
				}
			}
			return names
		}
	}
	t.Fatalf("no function %s in pilot/config", name)
	return nil
}

func callsFunc(fd *ast.FuncDecl, name string) bool {
	found := false
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if id, ok := c.Fun.(*ast.Ident); ok && id.Name == name {
				found = true
			}
		}
		return !found
	})
	return found
}

// A field the page calls honoured (or partly) is read by the generators: its Go field or getter is named
// in their source, or in the function of this package the table says reads it, which they call.
func TestCompatHonouredFieldsAreRead(t *testing.T) {
	read := selectorNames(t, generatorPackages, func(string) bool { return true })
	for kind, rows := range allCompatRows() {
		checkRowsRead(t, string(kind), rows, read, "compatTable")
	}
}

// meshReaders are the packages besides the generators that read the mesh config: the parser (fields it
// turns into Sextant's own, such as gatewayTopology), the sources (discoverySelectors), the authenticator
// and the CA (trust domain), the debug views.
var meshReaders = []string{"../mesh", "../source", "../authn", "../ca", "../debug", "../xds"}

// Every MeshConfig field, defaultConfig's ProxyConfig too, is in the mesh table as warned or rejected, or is
// read by product code, by its generated Go field or getter name: a field neither honoured nor reported
// fails here.
func TestCompatMeshHonouredFieldsAreRead(t *testing.T) {
	dirs := append(slices.Clone(generatorPackages), meshReaders...)
	read := selectorNames(t, dirs, func(string) bool { return true })
	// pilot/mesh decodes some fields into Sextant's own structs (ingressService into Ingress.Service): such
	// a field is read when the Go field its JSON name tags is.
	for jsonName, goNames := range jsonTaggedFields(t, []string{"../mesh"}) {
		if slices.ContainsFunc(goNames, func(n string) bool { return read[n] }) {
			read["json:"+jsonName] = true
		}
	}
	// Decoded into Kubernetes' metav1.LabelSelector, whose matchExpressions LabelSelectorAsSelector reads.
	read["json:matchExpressions"], read["json:operator"] = read["DiscoverySelectors"], read["DiscoverySelectors"]
	var rows []CompatRow
	for _, r := range CompatMeshRows() {
		if !read["json:"+r.Field.JSONName()] {
			rows = append(rows, r)
		}
	}
	checkRowsRead(t, "mesh config", rows, read, "meshCompatGroups")
}

// jsonTaggedFields returns, by JSON name, the Go fields of the structs declared in the non-test Go files
// under dirs that a json tag names so.
func jsonTaggedFields(t *testing.T, dirs []string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		files, err := goFilesUnder(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				field, ok := n.(*ast.Field)
				if !ok || field.Tag == nil || len(field.Names) != 1 {
					return true
				}
				tag, _ := strconv.Unquote(field.Tag.Value)
				name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
				if name != "" && name != "-" {
					out[name] = append(out[name], field.Names[0].Name)
				}
				return true
			})
		}
	}
	return out
}

func checkRowsRead(t *testing.T, kind string, rows []CompatRow, read map[string]bool, table string) {
	t.Helper()
	for _, r := range rows {
		if r.CoveredBy != "" || r.Entry.Status == Warned || r.Entry.Status == Rejected {
			continue
		}
		name := goFieldName(t, r.Field)
		if by := r.Entry.ReadBy; by != "" {
			if !read[by] {
				t.Errorf("%s %s: read by %s, which no generator calls", kind, r.Path, by)
			}
			if names := funcSelectorNames(t, by); !names[name] && !names["Get"+name] {
				t.Errorf("%s %s: %s does not read %s", kind, r.Path, by, name)
			}
			continue
		}
		if !read[name] && !read["Get"+name] {
			t.Errorf("%s %s (%s.%s): marked honoured, but nothing reads %s or Get%s: warn about it and list it in %s",
				kind, r.Path, r.Field.ContainingMessage().FullName(), r.Field.Name(), name, name, table)
		}
	}
}

// compatBase is a small valid object of each kind, for setting one field into.
var compatBase = map[Kind]string{
	VirtualService: "hosts: [a]\n  http: [{route: [{destination: {host: a}}]}]\n",
	DestinationRule: "host: a\n  trafficPolicy: {portLevelSettings: [{port: {number: 80}}]}\n" +
		"  subsets: [{name: v1, trafficPolicy: {portLevelSettings: [{port: {number: 80}}]}}]\n",
	Gateway:               "servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']}]\n",
	Sidecar:               "egress: [{hosts: ['./*']}]\n",
	ServiceEntry:          "hosts: [a.example.com]\n",
	WorkloadEntry:         "address: 10.0.0.1\n",
	AuthorizationPolicy:   "action: ALLOW\n",
	PeerAuthentication:    "mtls: {mode: STRICT}\n",
	RequestAuthentication: "selector: {matchLabels: {app: a}}\n",
	ProxyConfig:           "concurrency: 2\n",
	WorkloadGroup:         "template: {ports: {http: 8080}}\n",
}

func compatObject(t *testing.T, kind Kind) *Config {
	t.Helper()
	ki, _ := Info(kind)
	doc := "apiVersion: " + ki.APIVersion() + "\nkind: " + string(kind) +
		"\nmetadata: {name: x, namespace: shop}\nspec:\n  " + compatBase[kind]
	c, err := Parse([]byte(doc), "compat.yaml", 0, "shop")
	if err != nil {
		t.Fatalf("%s base: %v", kind, err)
	}
	return c
}

// setCompatField sets the field at the end of chain in m, creating what lies on the way (the first list
// element, a map entry), to value if given (an enum value's name) or else to a non-zero value.
func setCompatField(m protoreflect.Message, chain []protoreflect.FieldDescriptor, value string) {
	for i, f := range chain {
		last := i == len(chain)-1
		switch {
		case f.IsList():
			l := m.Mutable(f).List()
			if last {
				e := l.NewElement()
				if f.Message() != nil {
					fillMessage(e.Message())
				} else {
					e = scalarValue(f, value)
				}
				l.Append(e)
				return
			}
			if l.Len() == 0 {
				l.Append(l.NewElement())
			}
			m = l.Get(0).Message()
		case f.IsMap():
			mp := m.Mutable(f).Map()
			key := scalarValue(f.MapKey(), "").MapKey()
			if last {
				if f.MapValue().Message() != nil {
					fillMessage(mp.Mutable(key).Message())
				} else {
					mp.Set(key, scalarValue(f.MapValue(), value))
				}
				return
			}
			m = mp.Mutable(key).Message()
		case f.Message() != nil:
			m = m.Mutable(f).Message()
			if last {
				fillMessage(m)
			}
		default:
			m.Set(f, scalarValue(f, value))
		}
	}
}

// fillMessage gives a well-known type (Duration, BoolValue, ...) a non-zero first field; other messages stay
// empty, which is set.
func fillMessage(m protoreflect.Message) {
	d := m.Descriptor()
	if strings.HasPrefix(string(d.FullName()), "google.protobuf.") && d.Fields().Len() > 0 {
		if f := d.Fields().Get(0); !f.IsList() && !f.IsMap() && f.Message() == nil {
			m.Set(f, scalarValue(f, ""))
		}
	}
}

func scalarValue(f protoreflect.FieldDescriptor, value string) protoreflect.Value {
	switch f.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("x")
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("x"))
	case protoreflect.EnumKind:
		if value != "" {
			return protoreflect.ValueOfEnum(f.Enum().Values().ByName(protoreflect.Name(value)).Number())
		}
		return protoreflect.ValueOfEnum(f.Enum().Values().Get(1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(1)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(1)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(1)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(1)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(1)
	}
	panic("unsupported kind " + f.Kind().String())
}

var fieldIndex = regexp.MustCompile(`\[[^\]]*\]`)

func stripIndices(field string) string { return fieldIndex.ReplaceAllString(field, "[]") }

func warnedAt(c *Config, path string) bool {
	// A list is named as a whole (spec.ingress) or by element (spec.targetRefs[1]).
	return slices.ContainsFunc(Warnings(c), func(w *FieldError) bool {
		f := stripIndices(w.Field)
		return f == path || f == strings.TrimSuffix(path, "[]")
	})
}

// A field the page calls warned produces a warning naming it when set (a partly honoured one, for each value
// the page names); a field it calls honoured produces none.
func TestCompatWarnedFieldsWarn(t *testing.T) {
	for kind, rows := range allCompatRows() {
		for _, r := range rows {
			if r.CoveredBy != "" {
				continue
			}
			values := []string{""}
			if len(r.Entry.Values) > 0 {
				values = r.Entry.Values
			}
			for _, v := range values {
				c := compatObject(t, kind)
				setCompatField(c.Spec.(interface{ ProtoReflect() protoreflect.Message }).ProtoReflect(), r.chain, v)
				warned := warnedAt(c, r.Path)
				switch r.Entry.Status {
				case Warned, Partly:
					if !warned {
						t.Errorf("%s %s %s: marked %s, but Warnings gives %v", kind, r.Path, v, r.Entry.Status, warningFieldList(c))
					}
				case Honoured:
					if warned {
						t.Errorf("%s %s: marked honoured, but Warnings names it: list it in compatTable", kind, r.Path)
					}
				}
			}
		}
	}
}

func warningFieldList(c *Config) []string {
	var out []string
	for _, w := range Warnings(c) {
		out = append(out, w.Field)
	}
	return out
}

// A field the page calls rejected fails validation, naming it.
func TestCompatRejectedFieldsFail(t *testing.T) {
	for kind, rows := range allCompatRows() {
		for _, r := range rows {
			if r.CoveredBy != "" || r.Entry.Status != Rejected {
				continue
			}
			c := compatObject(t, kind)
			setCompatField(c.Spec.(interface{ ProtoReflect() protoreflect.Message }).ProtoReflect(), r.chain, "")
			var fe *FieldError
			if err := Validate(c); !errors.As(err, &fe) || stripIndices(fe.Field) != r.Path {
				t.Errorf("%s %s: marked rejected, but Validate gives %v", kind, r.Path, err)
			}
		}
	}
}
