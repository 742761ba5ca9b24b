package envoymodel

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	_ "crypto/sha256" // hashes for RS/PS/ES 256
	_ "crypto/sha512" // and 384, 512
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	jwtpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// JWTNamespace is the dynamic metadata namespace the jwt_authn filter writes.
const JWTNamespace = "envoy.filters.http.jwt_authn"

// jwtStatus is jwt_verify_lib's Status, by the message Envoy answers with.
type jwtStatus string

const (
	jwtOK               jwtStatus = ""
	jwtMissed           jwtStatus = "Jwt is missing"
	jwtExpired          jwtStatus = "Jwt is expired"
	jwtNotYetValid      jwtStatus = "Jwt not yet valid"
	jwtUnknownIssuer    jwtStatus = "Jwt issuer is not configured"
	jwtAudienceNotAllow jwtStatus = "Audiences in Jwt are not allowed"
	jwtBadFormat        jwtStatus = "Jwt is not in the form of Header.Payload.Signature"
	jwtVerificationFail jwtStatus = "Jwt verification fails"
	jwtKidAlgMismatch   jwtStatus = "Jwks doesn't have key to match kid or alg from Jwt"
	jwtBadAlg           jwtStatus = "Jwt header [alg] is not supported"
	jwksNoValidKeys     jwtStatus = "Jwks doesn't have valid keys"
)

// jwtFilter is one jwt_authn filter's config for one request.
type jwtFilter struct {
	s         *stream
	cfg       *jwtpb.JwtAuthentication
	extracted map[string]*structpb.Value
	keys      map[string][]jwk // by provider name
}

// jwtAuthn is the filter's decodeHeaders: the first rule whose match fits the request chooses the
// requirement; none means no check. A failure answers 401 (403 for audiences not allowed).
func (s *stream) jwtAuthn(name string, c *jwtpb.JwtAuthentication) (bool, error) {
	if c.GetFilterStateRules() != nil {
		return false, notModelled("jwt_authn %s: filter_state_rules", name)
	}
	// A CORS preflight carries no credentials: with bypass_cors_preflight it passes whatever the rules say.
	if c.GetBypassCorsPreflight() && s.headers.first(":method") == "OPTIONS" &&
		s.headers.first("origin") != "" && s.headers.first("access-control-request-method") != "" {
		s.tracef("%s: CORS preflight bypassed", name)
		return true, nil
	}
	if s.route != nil && s.route.GetTypedPerFilterConfig()[name] != nil {
		return false, notModelled("jwt_authn %s: per-route requirement", name)
	}
	f := &jwtFilter{s: s, cfg: c, extracted: map[string]*structpb.Value{}, keys: map[string][]jwk{}}
	for pname, p := range c.GetProviders() {
		if err := checkProvider(pname, p); err != nil {
			return false, err
		}
		keys, err := loadJWKS(p)
		if err != nil {
			return false, fmt.Errorf("jwt_authn %s provider %s: %w", name, pname, err)
		}
		f.keys[pname] = keys
	}
	var req *jwtpb.JwtRequirement
rules:
	for i, r := range c.GetRules() {
		ok, err := s.routeMatches(r.GetMatch())
		if err != nil {
			return false, fmt.Errorf("jwt_authn %s rule %d: %w", name, i, err)
		}
		if !ok {
			continue
		}
		switch rt := r.GetRequirementType().(type) {
		case *jwtpb.RequirementRule_Requires:
			req = rt.Requires
		case *jwtpb.RequirementRule_RequirementName:
			req = c.GetRequirementMap()[rt.RequirementName]
			if req == nil {
				return false, fmt.Errorf("jwt_authn %s: requirement %q is not in requirement_map", name, rt.RequirementName)
			}
		default:
			req = &jwtpb.JwtRequirement{} // no requirement type: allow all
		}
		break rules
	}
	if req == nil {
		s.tracef("%s: no rule matches, no check", name)
		return true, nil
	}
	st, err := f.verify(req)
	if err != nil {
		return false, err
	}
	if len(f.extracted) > 0 {
		s.setMetadata(JWTNamespace, f.extracted)
	}
	if st != jwtOK {
		code := 401
		if st == jwtAudienceNotAllow {
			code = 403
		}
		s.localReply(name, code, "Failed JWT authentication: "+string(st))
		return false, nil
	}
	s.tracef("%s: OK", name)
	return true, nil
}

func checkProvider(name string, p *jwtpb.JwtProvider) error {
	switch {
	case p.GetRemoteJwks() != nil:
		return notModelled("jwt provider %s: remote_jwks (Envoy would fetch it)", name)
	case p.GetSubjects() != nil || p.GetMaxLifetime() != nil || p.GetRequireExpiration():
		return notModelled("jwt provider %s: subjects, max_lifetime or require_expiration", name)
	}
	return nil
}

// verify is Verifier::create's tree for one requirement.
func (f *jwtFilter) verify(r *jwtpb.JwtRequirement) (jwtStatus, error) {
	all := f.providerNames()
	switch rt := r.GetRequiresType().(type) {
	case nil:
		return jwtOK, nil
	case *jwtpb.JwtRequirement_ProviderName:
		return f.authenticate([]string{rt.ProviderName}, true, false, false, nil)
	case *jwtpb.JwtRequirement_ProviderAndAudiences:
		return f.authenticate([]string{rt.ProviderAndAudiences.GetProviderName()}, true, false, false, rt.ProviderAndAudiences.GetAudiences())
	case *jwtpb.JwtRequirement_AllowMissing:
		return f.authenticate(all, false, false, true, nil)
	case *jwtpb.JwtRequirement_AllowMissingOrFailed:
		return f.authenticate(all, false, true, true, nil)
	case *jwtpb.JwtRequirement_RequiresAll:
		for _, q := range rt.RequiresAll.GetRequirements() {
			st, err := f.verify(q)
			if err != nil || st != jwtOK {
				return st, err
			}
		}
		return jwtOK, nil
	case *jwtpb.JwtRequirement_RequiresAny:
		// AnyVerifierImpl: allow_missing(_or_failed) alternatives are flags over the others' result.
		var children []*jwtpb.JwtRequirement
		allowMissing, allowFailed := false, false
		for _, q := range rt.RequiresAny.GetRequirements() {
			switch q.GetRequiresType().(type) {
			case *jwtpb.JwtRequirement_AllowMissing:
				allowMissing = true
			case *jwtpb.JwtRequirement_AllowMissingOrFailed:
				allowFailed = true
			default:
				children = append(children, q)
			}
		}
		if len(children) == 0 {
			if allowFailed {
				return f.authenticate(all, false, true, true, nil)
			}
			return f.authenticate(all, false, false, true, nil)
		}
		final := jwtMissed
		for _, q := range children {
			st, err := f.verify(q)
			if err != nil {
				return "", err
			}
			if st == jwtOK {
				return jwtOK, nil
			}
			// Prefer errors other than missing or unknown issuer; unknown issuer over missing.
			if (st != jwtMissed && st != jwtUnknownIssuer) || final == jwtMissed {
				final = st
			}
		}
		switch {
		case allowFailed:
			return jwtOK, nil
		case allowMissing && final == jwtMissed:
			return jwtOK, nil
		}
		return final, nil
	}
	return "", notModelled("jwt requirement %T", r.GetRequiresType())
}

func (f *jwtFilter) providerNames() []string {
	var names []string
	for n := range f.cfg.GetProviders() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// jwtLocation is one extracted token and the issuers its location admits ("" admits any).
type jwtLocation struct {
	token   string
	issuers map[string]bool
	header  string // the header it came from, to remove when not forwarded
}

func (l jwtLocation) issuerAllowed(iss string) bool { return l.issuers[""] || l.issuers[iss] }

// extract is ExtractorImpl::extract over the named providers: header locations (sorted by name and
// prefix), then query parameters, then cookies.
func (f *jwtFilter) extract(providers []string) []jwtLocation {
	type spec struct {
		header, prefix string
		issuers        map[string]bool
	}
	headers := map[string]*spec{}
	params := map[string]map[string]bool{}
	cookies := map[string]map[string]bool{}
	addHeader := func(iss, name, prefix string) {
		key := strings.ToLower(name) + prefix
		if headers[key] == nil {
			headers[key] = &spec{header: strings.ToLower(name), prefix: prefix, issuers: map[string]bool{}}
		}
		headers[key].issuers[iss] = true
	}
	add := func(m map[string]map[string]bool, iss, k string) {
		if m[k] == nil {
			m[k] = map[string]bool{}
		}
		m[k][iss] = true
	}
	for _, n := range providers {
		p := f.cfg.GetProviders()[n]
		for _, h := range p.GetFromHeaders() {
			addHeader(p.GetIssuer(), h.GetName(), h.GetValuePrefix())
		}
		for _, q := range p.GetFromParams() {
			add(params, p.GetIssuer(), q)
		}
		for _, c := range p.GetFromCookies() {
			add(cookies, p.GetIssuer(), c)
		}
		if len(p.GetFromHeaders())+len(p.GetFromParams())+len(p.GetFromCookies()) == 0 {
			addHeader(p.GetIssuer(), "authorization", "Bearer ")
			add(params, p.GetIssuer(), "access_token")
		}
	}
	var out []jwtLocation
	for _, k := range sortedKeys(headers) {
		sp := headers[k]
		v, ok := f.s.headers.get(sp.header)
		if !ok {
			continue
		}
		if sp.prefix != "" {
			pos := strings.Index(v, sp.prefix)
			if pos < 0 {
				continue
			}
			v = extractJWT(v, pos+len(sp.prefix))
		}
		out = append(out, jwtLocation{token: v, issuers: sp.issuers, header: sp.header})
	}
	if len(params) > 0 {
		p := f.s.headers.first(":path")
		if i := strings.Index(p, "?"); i >= 0 {
			q, _ := url.ParseQuery(p[i+1:])
			for _, k := range sortedKeys(params) {
				if vs, ok := q[k]; ok && len(vs) > 0 {
					out = append(out, jwtLocation{token: vs[0], issuers: params[k]})
				}
			}
		}
	}
	if len(cookies) > 0 {
		jar := map[string]string{}
		for _, line := range f.s.headers.values["cookie"] {
			for _, part := range strings.Split(line, ";") {
				k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
				if ok {
					if _, seen := jar[k]; !seen {
						jar[k] = strings.Trim(v, `"`)
					}
				}
			}
		}
		for _, k := range sortedKeys(cookies) {
			if v, ok := jar[k]; ok {
				out = append(out, jwtLocation{token: v, issuers: cookies[k]})
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

const base64URLAndDot = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."

// extractJWT takes the run of base64url characters and dots after the prefix; the value as-is when none.
func extractJWT(v string, after int) string {
	start := strings.IndexAny(v[after:], base64URLAndDot)
	if start < 0 {
		return v
	}
	start += after
	end := start
	for end < len(v) && strings.IndexByte(base64URLAndDot, v[end]) >= 0 {
		end++
	}
	return v[start:end]
}

// authenticate is AuthenticatorImpl: provider-bound when bound (one provider), otherwise over all the
// providers' locations with the provider found by the token's issuer. Tokens are verified from the last
// extracted; unless failures or absence are allowed, every token must verify.
func (f *jwtFilter) authenticate(providers []string, bound, allowFailed, allowMissing bool, audiences []string) (jwtStatus, error) {
	for _, n := range providers {
		if f.cfg.GetProviders()[n] == nil {
			return "", fmt.Errorf("jwt requirement names provider %q, which is not configured (Envoy rejects the config)", n)
		}
	}
	// sanitizeHeaders: a client cannot send the headers a verified token would set.
	for _, n := range providers {
		p := f.cfg.GetProviders()[n]
		if h := p.GetForwardPayloadHeader(); h != "" {
			f.s.headers.del(h)
		}
		for _, ch := range p.GetClaimToHeaders() {
			f.s.headers.del(ch.GetHeaderName())
		}
	}
	tokens := f.extract(providers)
	done := func(st jwtStatus) jwtStatus {
		switch {
		case allowFailed:
			return jwtOK
		case allowMissing && st == jwtMissed:
			return jwtOK
		}
		return st
	}
	if len(tokens) == 0 {
		return done(jwtMissed), nil
	}
	var st jwtStatus
	for i := len(tokens) - 1; i >= 0; i-- {
		var err error
		st, err = f.verifyToken(tokens[i], providers, bound, audiences)
		if err != nil {
			return "", err
		}
		if st != jwtOK && !allowFailed && !allowMissing {
			return st, nil
		}
	}
	return done(st), nil
}

type jwtToken struct {
	alg, kid     string
	iss          string
	aud          []string
	exp, nbf     int64
	signingInput string
	signature    []byte
	payload      *structpb.Struct
}

func b64(s string) ([]byte, error) {
	if b, err := base64.RawURLEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	return base64.URLEncoding.DecodeString(s)
}

func parseJWT(s string) (*jwtToken, jwtStatus) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return nil, jwtBadFormat
	}
	hb, err1 := b64(parts[0])
	pb, err2 := b64(parts[1])
	sig, err3 := b64(parts[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return nil, jwtBadFormat
	}
	var h struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if json.Unmarshal(hb, &h) != nil {
		return nil, jwtBadFormat
	}
	switch h.Alg {
	case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512":
	default:
		return nil, jwtBadAlg
	}
	var payload structpb.Struct
	if payload.UnmarshalJSON(pb) != nil {
		return nil, jwtBadFormat
	}
	t := &jwtToken{alg: h.Alg, kid: h.Kid, signingInput: parts[0] + "." + parts[1], signature: sig, payload: &payload}
	fields := payload.GetFields()
	t.iss = fields["iss"].GetStringValue()
	switch a := fields["aud"].GetKind().(type) {
	case *structpb.Value_StringValue:
		t.aud = []string{a.StringValue}
	case *structpb.Value_ListValue:
		for _, v := range a.ListValue.GetValues() {
			t.aud = append(t.aud, v.GetStringValue())
		}
	}
	t.exp = int64(fields["exp"].GetNumberValue())
	t.nbf = int64(fields["nbf"].GetNumberValue())
	return t, jwtOK
}

// verifyToken runs startVerify and verifyKey for one token.
func (f *jwtFilter) verifyToken(loc jwtLocation, providers []string, bound bool, audiences []string) (jwtStatus, error) {
	t, st := parseJWT(loc.token)
	if st != jwtOK {
		return st, nil
	}
	if !loc.issuerAllowed(t.iss) {
		return jwtUnknownIssuer, nil
	}
	var name string
	if bound {
		name = providers[0]
	} else {
		// The first provider with the token's issuer, else the first without an issuer.
		for _, n := range providers {
			if f.cfg.GetProviders()[n].GetIssuer() == t.iss {
				name = n
				break
			}
		}
		if name == "" {
			for _, n := range providers {
				if f.cfg.GetProviders()[n].GetIssuer() == "" {
					name = n
					break
				}
			}
		}
		if name == "" {
			return jwtUnknownIssuer, nil
		}
	}
	p := f.cfg.GetProviders()[name]
	skew := int64(60)
	if p.GetClockSkewSeconds() > 0 {
		skew = int64(p.GetClockSkewSeconds())
	}
	now := time.Now()
	if f.s.p.Now != nil {
		now = f.s.p.Now()
	}
	unix := now.Unix()
	if unix+skew < t.nbf {
		return jwtNotYetValid, nil
	}
	if t.exp != 0 && unix > t.exp+skew {
		return jwtExpired, nil
	}
	allowed := audiences
	if allowed == nil {
		allowed = p.GetAudiences()
	}
	if !audiencesAllowed(allowed, t.aud) {
		return jwtAudienceNotAllow, nil
	}
	if st := verifySignature(t, f.keys[name]); st != jwtOK {
		return st, nil
	}
	// handleGoodJwt: payload header, claims to headers, removal of the token, metadata.
	if h := p.GetForwardPayloadHeader(); h != "" {
		enc := strings.Split(loc.token, ".")[1]
		if p.GetPadForwardPayloadHeader() {
			for len(enc)%4 != 0 {
				enc += "="
			}
		}
		f.s.headers.add(h, enc)
	}
	for _, ch := range p.GetClaimToHeaders() {
		if v := claimString(t.payload, ch.GetClaimName()); v != "" {
			f.s.headers.add(ch.GetHeaderName(), v)
		}
	}
	if !p.GetForward() && loc.header != "" {
		f.s.headers.del(loc.header)
	}
	if p.GetHeaderInMetadata() != "" {
		return "", notModelled("jwt provider %s: header_in_metadata", name)
	}
	if m := p.GetPayloadInMetadata(); m != "" {
		f.extracted[m] = structpb.NewStructValue(normalizePayload(t.payload, p.GetNormalizePayloadInMetadata().GetSpaceDelimitedClaims()))
	}
	return jwtOK, nil
}

// normalizePayload splits the named string claims on spaces into lists.
func normalizePayload(payload *structpb.Struct, claims []string) *structpb.Struct {
	out := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for k, v := range payload.GetFields() {
		out.Fields[k] = v
	}
	for _, c := range claims {
		v, ok := payload.GetFields()[c].GetKind().(*structpb.Value_StringValue)
		if !ok {
			continue
		}
		var list []any
		for _, e := range strings.Split(v.StringValue, " ") {
			if e != "" {
				list = append(list, e)
			}
		}
		lv, _ := structpb.NewList(list)
		out.Fields[c] = structpb.NewListValue(lv)
	}
	return out
}

// claimString is addJWTClaimToHeader's value: strings as they are, numbers as integers where whole,
// booleans as words; nested claims by dotted path.
func claimString(payload *structpb.Struct, name string) string {
	var v *structpb.Value = structpb.NewStructValue(payload)
	for _, part := range strings.Split(name, ".") {
		v = v.GetStructValue().GetFields()[part]
		if v == nil {
			return ""
		}
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return k.StringValue
	case *structpb.Value_NumberValue:
		if k.NumberValue >= 0 && k.NumberValue == float64(int64(k.NumberValue)) {
			return strconv.FormatInt(int64(k.NumberValue), 10)
		}
		return strconv.FormatFloat(k.NumberValue, 'f', 6, 64)
	case *structpb.Value_BoolValue:
		return strconv.FormatBool(k.BoolValue)
	case *structpb.Value_StructValue, *structpb.Value_ListValue:
		b, err := v.MarshalJSON()
		if err != nil {
			return ""
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	return ""
}

// audiencesAllowed is CheckAudience: no configured audiences admit any; otherwise one of the token's,
// compared without a scheme prefix and a trailing slash.
func audiencesAllowed(allowed, got []string) bool {
	if len(allowed) == 0 {
		return true
	}
	norm := func(s string) string {
		s = strings.TrimPrefix(strings.TrimPrefix(s, "http://"), "https://")
		return strings.TrimSuffix(s, "/")
	}
	set := map[string]bool{}
	for _, a := range allowed {
		set[norm(a)] = true
	}
	for _, a := range got {
		if set[norm(a)] {
			return true
		}
	}
	return false
}

// jwk is one key of a key set.
type jwk struct {
	kid, alg, kty string
	pub           crypto.PublicKey
}

func loadJWKS(p *jwtpb.JwtProvider) ([]jwk, error) {
	ds := p.GetLocalJwks()
	if ds == nil {
		return nil, notModelled("jwt provider without local_jwks")
	}
	var raw []byte
	switch {
	case ds.GetInlineString() != "":
		raw = []byte(ds.GetInlineString())
	case len(ds.GetInlineBytes()) > 0:
		raw = ds.GetInlineBytes()
	case ds.GetFilename() != "":
		b, err := os.ReadFile(ds.GetFilename())
		if err != nil {
			return nil, err
		}
		raw = b
	default:
		return nil, notModelled("local_jwks data source %v", ds)
	}
	var set struct {
		Keys []struct {
			Kty string `json:"kty"`
			Kid string `json:"kid"`
			Alg string `json:"alg"`
			N   string `json:"n"`
			E   string `json:"e"`
			Crv string `json:"crv"`
			X   string `json:"x"`
			Y   string `json:"y"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, notModelled("a key set that is not a JSON JWKS (PEM keys): %v", err)
	}
	var out []jwk
	for _, k := range set.Keys {
		key := jwk{kid: k.Kid, alg: k.Alg, kty: k.Kty}
		switch k.Kty {
		case "RSA":
			n, err1 := b64(k.N)
			e, err2 := b64(k.E)
			if err1 != nil || err2 != nil {
				continue
			}
			key.pub = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		case "EC":
			var curve elliptic.Curve
			switch k.Crv {
			case "P-256":
				curve = elliptic.P256()
			case "P-384":
				curve = elliptic.P384()
			case "P-521":
				curve = elliptic.P521()
			default:
				continue
			}
			x, err1 := b64(k.X)
			y, err2 := b64(k.Y)
			if err1 != nil || err2 != nil {
				continue
			}
			key.pub = &ecdsa.PublicKey{Curve: curve, X: new(big.Int).SetBytes(x), Y: new(big.Int).SetBytes(y)}
		default:
			continue
		}
		out = append(out, key)
	}
	return out, nil
}

// verifySignature is verifyJwt's key loop: keys whose kid (when both have one) and alg (when the key names
// one) fit are tried; one that verifies is enough.
func verifySignature(t *jwtToken, keys []jwk) jwtStatus {
	if len(keys) == 0 {
		return jwksNoValidKeys
	}
	tried := false
	for _, k := range keys {
		if t.kid != "" && k.kid != "" && k.kid != t.kid {
			continue
		}
		if k.alg != "" && k.alg != t.alg {
			continue
		}
		if err := verifyWith(t, k); err == nil {
			return jwtOK
		} else if !errors.Is(err, errWrongKeyType) {
			tried = true
		}
	}
	if !tried {
		return jwtKidAlgMismatch
	}
	return jwtVerificationFail
}

var errWrongKeyType = errors.New("key type does not fit the algorithm")

func verifyWith(t *jwtToken, k jwk) error {
	var h crypto.Hash
	switch t.alg[2:] {
	case "256":
		h = crypto.SHA256
	case "384":
		h = crypto.SHA384
	case "512":
		h = crypto.SHA512
	}
	d := h.New()
	d.Write([]byte(t.signingInput))
	sum := d.Sum(nil)
	switch t.alg[:2] {
	case "RS", "PS":
		pub, ok := k.pub.(*rsa.PublicKey)
		if !ok {
			return errWrongKeyType
		}
		if t.alg[:2] == "RS" {
			return rsa.VerifyPKCS1v15(pub, h, sum, t.signature)
		}
		return rsa.VerifyPSS(pub, h, sum, t.signature, nil)
	case "ES":
		pub, ok := k.pub.(*ecdsa.PublicKey)
		if !ok {
			return errWrongKeyType
		}
		size := (pub.Curve.Params().BitSize + 7) / 8
		if len(t.signature) != 2*size {
			return errors.New("bad ECDSA signature length")
		}
		r := new(big.Int).SetBytes(t.signature[:size])
		s := new(big.Int).SetBytes(t.signature[size:])
		if !ecdsa.Verify(pub, sum, r, s) {
			return errors.New("ECDSA signature does not verify")
		}
		return nil
	}
	return errWrongKeyType
}
