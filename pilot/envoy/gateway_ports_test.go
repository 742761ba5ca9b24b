package envoy

import (
	"slices"
	"testing"
)

// The gateway Service of testdata/lds/mesh.yaml's ingress gateway pod: port 80 to target port 8080, 443 to
// the container port named "https" (8443). A VirtualService matching port 80 checks that routes still
// match the server's port, the one clients address.
const gatewayService = `
apiVersion: v1
kind: Service
metadata: {name: istio-ingressgateway, namespace: istio-system}
spec:
  clusterIP: 10.96.1.1
  selector: {istio: ingressgateway}
  ports:
  - {name: http2, port: 80, targetPort: 8080}
  - {name: https, port: 443, targetPort: https}
---
apiVersion: v1
kind: Pod
metadata: {name: gw-1, namespace: istio-system, labels: {istio: ingressgateway}}
spec:
  serviceAccountName: gw
  containers:
  - name: istio-proxy
    ports: [{name: http2, containerPort: 8080}, {name: https, containerPort: 8443}]
status: {podIP: 10.1.1.1, phase: Running, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: by-port, namespace: shop}
spec:
  hosts: [ports.example.com]
  gateways: [istio-system/shop-gateway]
  http:
  - match: [{port: 80, uri: {prefix: /p}}]
    route:
    - destination: {host: frontend}
`

// istiod listens on the gateway Service's target ports, where traffic sent to the Service reaches the pod.
func TestGatewayListensOnServiceTargetPort(t *testing.T) {
	push := ldsPush(t, nil, gatewayService)
	g := New(Options{})
	ls := ldsGenerate(t, g, ldsGateway, push, wildcard(ListenerType))
	var names []string
	for _, l := range ls {
		names = append(names, l.Name)
	}
	if !slices.Equal(names, []string{"0.0.0.0_8080", "0.0.0.0_8443"}) {
		t.Fatalf("listeners %v, want 0.0.0.0_8080 and 0.0.0.0_8443 (the Service's target ports)", names)
	}
	if p := ls[0].Address.GetSocketAddress().GetPortValue(); p != 8080 {
		t.Errorf("http listener on port %d", p)
	}
	if got := ldsHCMOf(t, ls[0].FilterChains[0]).GetRds().GetRouteConfigName(); got != "http.8080" {
		t.Errorf("http route configuration %q, want http.8080", got)
	}
	// HTTPS configurations keep the server's port in their name, as istiod names them.
	if got := ldsHCMOf(t, ldsChain(t, ls[1], "0.0.0.0_8443/shop.example.com")).GetRds().GetRouteConfigName(); got !=
		"https.443.https-shop.shop-gateway.istio-system" {
		t.Errorf("https route configuration %q", got)
	}
	// The passthrough route matches port 443, the server's.
	if pass := ldsChain(t, ls[1], "0.0.0.0_8443/app.secure.example.com"); ldsTCPProxyOf(t, pass).GetCluster() !=
		"outbound|8443||secure-app.shop.svc.cluster.local" {
		t.Errorf("passthrough chain %v", pass)
	}

	rcs := generateRoutes(t, g, ldsGateway, push, wildcard(RouteType))
	var rcNames []string
	for _, rc := range rcs {
		rcNames = append(rcNames, rc.Name)
	}
	if !slices.Contains(rcNames, "http.8080") || slices.Contains(rcNames, "http.80") {
		t.Fatalf("route configurations %v, want http.8080 and no http.80", rcNames)
	}
	http := rcs[slices.Index(rcNames, "http.8080")]
	vh := virtualHost(t, http, "ports.example.com:80")
	if len(vh.Routes) != 1 || vh.Routes[0].GetRoute().GetCluster() != "outbound|80||frontend.shop.svc.cluster.local" {
		t.Errorf("a route matching port 80 on http.8080: %v", vh.Routes)
	}
}

// Without a Service selecting the pod, or with port translation disabled on it, the gateway listens on the
// servers' own ports.
func TestGatewayPortTranslationFallback(t *testing.T) {
	for name, extra := range map[string]string{
		"no service": `
apiVersion: v1
kind: Service
metadata: {name: other, namespace: istio-system}
spec:
  selector: {istio: egressgateway}
  ports: [{name: http2, port: 80, targetPort: 8080}]`,
		"translation disabled": `
apiVersion: v1
kind: Service
metadata:
  name: istio-ingressgateway
  namespace: istio-system
  labels: {experimental.istio.io/disable-gateway-port-translation: "true"}
spec:
  selector: {istio: ingressgateway}
  ports: [{name: http2, port: 80, targetPort: 8080}]`,
	} {
		t.Run(name, func(t *testing.T) {
			push := ldsPush(t, nil, extra)
			g := New(Options{})
			ls := ldsGenerate(t, g, ldsGateway, push, wildcard(ListenerType))
			if len(ls) != 2 || ls[0].Name != "0.0.0.0_80" || ldsHCMOf(t, ls[0].FilterChains[0]).GetRds().GetRouteConfigName() != "http.80" {
				t.Fatalf("listeners %v", ls)
			}
			rcs := generateRoutes(t, g, ldsGateway, push, named(RouteType, "http.80"))
			if len(rcs) != 1 {
				t.Fatalf("http.80: %v", rcs)
			}
		})
	}
}
