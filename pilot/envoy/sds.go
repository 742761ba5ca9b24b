package envoy

import (
	"log/slog"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/secretaccess"
)

// SDS over ADS serves the Secrets that Gateway and DestinationRule credentialName name, as istiod does:
//   - "kubernetes://NAME" is the Secret NAME of the proxy's namespace, its certificate and key (tls.crt and
//     tls.key, or cert and key) as a TlsCertificate; "kubernetes://NAME-cacert" is the CA (ca.crt or
//     cacert) of the Secret NAME-cacert if it exists, else of NAME, as a ValidationContext.
//     "kubernetes://NAMESPACE/NAME" names the namespace, which must be the proxy's own.
//   - Only an authenticated stream gets secrets, and only from the namespace of its verified identity
//     (a gateway's is the gateway's namespace): what a node claims proves nothing, and a Secret of another
//     namespace is never served (istiod allows one only as a Gateway API reference a ReferenceGrant
//     permits, which Sextant does not read). A key pair also needs the SecretAuthorizer's yes, when one is
//     configured (with a cluster: may the service account list Secrets there, as istiod asks; without
//     one: is the proxy a gateway, or its account named a reader, see secretaccess.FileMode); a CA alone
//     is public.
//   - A secret refused to a proxy is logged once and kept in SecretDenials (for /debug/config_errors)
//     until that proxy is served it or goes away; it is logged again only if the reason changes, so a
//     proxy pushed every second does not flood the log.
//   - A Secret that is missing, malformed or not allowed is left out of the response and logged, never an
//     error: the listener or cluster naming it waits for it (Envoy keeps it warming until its
//     initial_fetch_timeout) and nothing else is affected. A Secret edited into something unusable keeps
//     its previous version served (model.Credential).
//   - A Secret change pushes SDS only to the proxies that watch it, and only the secrets it concerns.
const (
	credentialPrefix = "kubernetes://"
	builtinPrefix    = "builtin://"
)

// SecretAuthorizer says whether a workload identity may read the Secrets of its namespace. It is asked
// on every SDS generation of a key pair and must answer from memory; a pending answer is followed by a
// push naming the identity in PushRequest.SecretAccessUpdated.
type SecretAuthorizer interface {
	MayReadSecrets(id authn.Identity) secretaccess.Decision
}

// GatewayAwareSecretAuthorizer is a SecretAuthorizer whose answer also depends on whether the proxy is a
// gateway (node type router): without a cluster (secretaccess.FileMode), gateways stand where RBAC would.
type GatewayAwareSecretAuthorizer interface {
	SecretAuthorizer
	MayReadSecretsAs(id authn.Identity, gateway bool) secretaccess.Decision
}

// mayReadSecrets asks a, telling it the proxy's type when it wants to know.
func mayReadSecrets(a SecretAuthorizer, proxy *model.Proxy) secretaccess.Decision {
	if ga, ok := a.(GatewayAwareSecretAuthorizer); ok {
		return ga.MayReadSecretsAs(*proxy.Identity, proxy.Type == model.Router)
	}
	return a.MayReadSecrets(*proxy.Identity)
}

type secretGenerator struct{ g *Generators }

var (
	_ model.DeltaGenerator = secretGenerator{}
	_ model.PushFilter     = secretGenerator{}
)

// credentialSecret returns the SDS config a listener or cluster names credentialName with (ca: its CA
// part), as istiod's ConstructSdsSecretConfigForCredential: builtin:// is the proxy's own mesh
// certificate from its agent, every other name a Secret served over ADS.
func credentialSecret(credentialName string, ca bool) *tlsv3.SdsSecretConfig {
	if strings.HasPrefix(credentialName, builtinPrefix) {
		if ca {
			return sdsSecret(sdsRoot)
		}
		return sdsSecret(sdsCert)
	}
	name := credentialName
	if !strings.Contains(name, "://") {
		name = credentialPrefix + name
	}
	if ca {
		name += model.CACertSuffix
	}
	return ldsADSSecret(name)
}

// secretRef is a parsed SDS resource name.
type secretRef struct {
	namespace string // as written; empty means the proxy's
	name      string // of the Secret asked for, with -cacert for a CA
}

func parseSecretName(resource string) (secretRef, bool) {
	rest, ok := strings.CutPrefix(resource, credentialPrefix)
	if !ok || rest == "" {
		return secretRef{}, false // the agent's own secrets (default, ROOTCA, file-...) and other providers
	}
	if ns, name, ok := strings.Cut(rest, "/"); ok {
		if ns == "" || name == "" || strings.Contains(name, "/") {
			return secretRef{}, false
		}
		return secretRef{namespace: ns, name: name}, true
	}
	return secretRef{name: rest}, true
}

// secretNamespace is the namespace a proxy may read secrets from: its verified identity's.
func secretNamespace(p *model.Proxy) (string, bool) {
	if p.Identity == nil {
		return "", false
	}
	return p.Identity.Namespace, true
}

// Generate implements model.Generator: every secret the proxy watches that it may have.
func (s secretGenerator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource,
	_ *model.PushRequest) (model.Resources, error) {
	return s.generate(proxy, push, w, nil), nil
}

// GenerateDeltas implements model.DeltaGenerator: on a push for changed Secrets, only the secrets they
// concern. Nothing is ever removed: Envoy keeps a secret it has until a new version comes (istiod sends
// nothing for a deleted Secret either).
func (s secretGenerator) GenerateDeltas(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource,
	req *model.PushRequest) (model.Resources, []string, bool, error) {
	if req == nil || req.Full && len(req.ConfigsUpdated) == 0 {
		return s.generate(proxy, push, w, nil), nil, false, nil
	}
	ns, ok := secretNamespace(proxy)
	if !ok {
		return nil, nil, true, nil
	}
	if accessDecided(proxy, req) {
		// Whatever the proxy may now have; nothing it had is taken back (see above).
		return s.generate(proxy, push, w, nil), nil, true, nil
	}
	return s.generate(proxy, push, w, func(ref secretRef) bool { return secretChanged(req, ns, ref) }), nil, true, nil
}

// NeedsPush implements model.PushFilter: a push concerns SDS when a Secret the proxy watches changed.
func (s secretGenerator) NeedsPush(proxy *model.Proxy, w *model.WatchedResource, req *model.PushRequest) bool {
	if req == nil {
		return true
	}
	ns, ok := secretNamespace(proxy)
	if !ok {
		return false
	}
	if req.Full && len(req.ConfigsUpdated) == 0 {
		return true // the first snapshot, or the mesh config: anything may have changed
	}
	if accessDecided(proxy, req) {
		return true
	}
	for k := range req.ConfigsUpdated {
		if k.Kind != config.Secret || k.Namespace != ns {
			continue
		}
		for _, name := range []string{k.Name, strings.TrimSuffix(k.Name, model.CACertSuffix)} {
			for _, r := range []string{credentialPrefix + name, credentialPrefix + name + model.CACertSuffix,
				credentialPrefix + ns + "/" + name, credentialPrefix + ns + "/" + name + model.CACertSuffix} {
				if w.ResourceNames.Has(r) {
					return true
				}
			}
		}
	}
	return false
}

// accessDecided reports whether req carries a new SecretAuthorizer answer for the proxy's identity.
func accessDecided(proxy *model.Proxy, req *model.PushRequest) bool {
	if proxy.Identity == nil || len(req.SecretAccessUpdated) == 0 {
		return false
	}
	_, ok := req.SecretAccessUpdated[proxy.Identity.Account()]
	return ok
}

// secretChanged reports whether ref, read in namespace ns, depends on a Secret req changed: NAME-cacert
// reads the Secret NAME-cacert or NAME, NAME only NAME.
func secretChanged(req *model.PushRequest, ns string, ref secretRef) bool {
	if _, ok := req.ConfigsUpdated[config.Key{Kind: config.Secret, Namespace: ns, Name: ref.name}]; ok {
		return true
	}
	if base, ca := strings.CutSuffix(ref.name, model.CACertSuffix); ca {
		_, ok := req.ConfigsUpdated[config.Key{Kind: config.Secret, Namespace: ns, Name: base}]
		return ok
	}
	return false
}

func (s secretGenerator) generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource,
	only func(secretRef) bool) model.Resources {
	names := w.ResourceNames.Sorted()
	ns, authenticated := secretNamespace(proxy)
	var out model.Resources
	for _, resource := range names {
		ref, ok := parseSecretName(resource)
		if !ok {
			continue
		}
		log := slog.With("proxy", proxy.String(), "secret", resource)
		if !authenticated {
			const why = "secrets go only to authenticated streams (xDS over TLS, port 15012), never on the plaintext port"
			if s.g.denials.deny(proxy, resource, ref.namespace, "", why) {
				log.Warn("secret not served: " + why)
			}
			continue
		}
		if only != nil && (ref.namespace != "" && ref.namespace != ns || !only(ref)) {
			continue // a push for changed Secrets: the rest was answered (or refused, and logged) before
		}
		if ref.namespace != "" && ref.namespace != ns {
			why := "it names namespace " + ref.namespace + ", not the namespace of the proxy's verified identity " +
				proxy.Identity.String() + " (a proxy is served only its own namespace's Secrets)"
			if s.g.denials.deny(proxy, resource, ref.namespace, proxy.Identity.String(), why) {
				log.Warn("secret not served: " + why)
			}
			continue
		}
		log = log.With("namespace", ns)
		if base, ca := strings.CutSuffix(ref.name, model.CACertSuffix); ca {
			s.g.denials.allow(proxy, resource)
			bundle, found, problem := push.CABundle(ns, base)
			switch {
			case !found:
				log.Warn("secret not served: neither Secret " + ns + "/" + ref.name + " nor " + ns + "/" + base + " exists")
				continue
			case bundle == nil:
				log.Warn("secret not served: its Secret has no usable CA", "error", problem)
				continue
			case problem != nil:
				log.Warn("Secret malformed; serving its previous version", "error", problem)
			}
			if r := secretResource(resource, caSecret(resource, bundle)); r != nil {
				out = append(out, r)
			}
			continue
		}
		cred := push.Credential(ns, ref.name)
		if cred == nil {
			log.Warn("secret not served: Secret " + ns + "/" + ref.name + " not found")
			continue
		}
		if a := s.g.secretAuthorizer; a != nil {
			switch d := mayReadSecrets(a, proxy); {
			case d.Pending:
				// Pushed again when the answer comes (PushRequest.SecretAccessUpdated).
				log.Debug("secret not served yet: " + d.Reason)
				continue
			case !d.Allowed:
				if s.g.denials.deny(proxy, resource, ns, proxy.Identity.String(), d.Reason) {
					log.Warn("secret not served: the proxy's identity may not read Secrets of its namespace",
						"identity", proxy.Identity.String(), "reason", d.Reason)
				}
				continue
			}
		}
		s.g.denials.allow(proxy, resource)
		kp, problem := cred.KeyPair()
		switch {
		case kp == nil:
			log.Warn("secret not served: Secret "+ns+"/"+ref.name+" holds no usable certificate", "error", problem)
			continue
		case problem != nil:
			log.Warn("Secret "+ns+"/"+ref.name+" malformed; serving its previous version", "error", problem)
		}
		if p := certificateExpiry(kp); p != "" {
			log.Warn("serving a certificate outside its validity", "problem", p)
		}
		if r := secretResource(resource, tlsSecret(resource, kp)); r != nil {
			out = append(out, r)
		}
	}
	return out
}

func certificateExpiry(kp *model.KeyPair) string { return model.CertificateExpiry(kp, time.Now()) }

func inline(b []byte) *core.DataSource {
	return &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: b}}
}

func tlsSecret(name string, kp *model.KeyPair) *tlsv3.Secret {
	cert := &tlsv3.TlsCertificate{CertificateChain: inline(kp.Cert), PrivateKey: inline(kp.Key)}
	if len(kp.Staple) > 0 {
		cert.OcspStaple = inline(kp.Staple)
	}
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: cert}}
}

func caSecret(name string, ca *model.CABundle) *tlsv3.Secret {
	vc := &tlsv3.CertificateValidationContext{TrustedCa: inline(ca.CA)}
	if len(ca.CRL) > 0 {
		vc.Crl = inline(ca.CRL)
	}
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_ValidationContext{ValidationContext: vc}}
}

// secretResource marshals a secret; never cached, so key material lives no longer than the snapshot.
func secretResource(name string, s *tlsv3.Secret) *model.Resource {
	r, err := marshal(name, s)
	if err != nil {
		slog.Error("sds: marshal", "secret", name, "error", err)
		return nil
	}
	return r
}
