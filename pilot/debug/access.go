package debug

import (
	"context"
	"errors"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/sextantmesh/sextant/pilot/authn"
)

// Access says who may read /debug/*, as istiod's debug authorization: a loopback caller (the process
// itself, kubectl port-forward, an exec'd shell) may read everything; any other caller must present a
// service-account token (Authorization: Bearer TOKEN). A token of an admin namespace reads everything;
// one of another namespace reads only the config_dump of that namespace's proxies. /metrics, /ready
// and /healthz are not behind it.
type Access struct {
	// Tokens verifies bearer tokens; nil when no cluster is configured, and then only loopback callers
	// are served.
	Tokens authn.TokenAuthenticator
	// AdminNamespaces may read every view (istiod: its system namespace and
	// DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES).
	AdminNamespaces []string
}

// namespacePaths are the views a caller of a non-admin namespace may read, for its own proxies only
// (istiod also lets them read edsz and ndsz, which Sextant does not have).
var namespacePaths = map[string]bool{"/debug/config_dump": true}

type callerNamespaceKey struct{}

// callerNamespace returns the namespace a request was authorized for, "" for full access.
func callerNamespace(ctx context.Context) string {
	ns, _ := ctx.Value(callerNamespaceKey{}).(string)
	return ns
}

func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// wrap guards h. A caller without access gets 401 (no or bad token) or 403 (a namespace that may not
// read this view), with a message saying what would be accepted.
func (a *Access) wrap(h http.Handler) http.Handler {
	if a == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fromLoopback(r) {
			h.ServeHTTP(w, r)
			return
		}
		token, err := bearerToken(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sextant debug"`)
			writeError(w, http.StatusUnauthorized, "debug endpoints answer loopback callers, or callers with a service-account token "+
				"(Authorization: Bearer TOKEN): "+err.Error())
			return
		}
		if a.Tokens == nil {
			writeError(w, http.StatusUnauthorized, "debug endpoints answer loopback callers only: token authentication needs a "+
				"Kubernetes cluster (use kubectl port-forward, or run the request inside the pod)")
			return
		}
		caller, err := a.Tokens.AuthenticateToken(r.Context(), token)
		if err != nil || len(caller.Identities) == 0 {
			if err == nil {
				err = errors.New("the token names no workload identity")
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="sextant debug", error="invalid_token"`)
			writeError(w, http.StatusUnauthorized, "debug endpoints: token refused: "+err.Error())
			return
		}
		var ns string
		for _, id := range caller.Identities {
			if slices.Contains(a.AdminNamespaces, id.Namespace) {
				h.ServeHTTP(w, r)
				return
			}
			if ns == "" {
				ns = id.Namespace
			}
		}
		if !namespacePaths[r.URL.Path] {
			writeError(w, http.StatusForbidden, "debug endpoints: "+caller.Identities[0].String()+" may read only "+
				strings.Join(slices.Sorted(maps.Keys(namespacePaths)), ", ")+" of proxies in namespace "+ns+
				"; every view needs an identity of "+strings.Join(a.AdminNamespaces, ", "))
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerNamespaceKey{}, ns)))
	})
}

// bearerToken reads "Authorization: Bearer TOKEN", given once.
func bearerToken(r *http.Request) (string, error) {
	values := r.Header.Values("Authorization")
	switch {
	case len(values) == 0:
		return "", errors.New("no token")
	case len(values) > 1:
		return "", errors.New("Authorization given more than once")
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", errors.New(`Authorization: want "Bearer TOKEN"`)
	}
	return strings.TrimSpace(token), nil
}
