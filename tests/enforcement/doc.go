// Package enforcement checks that the policies Sextant accepts are enforced as Istio documents them, by
// real clients and servers (or faithful models of them) on loopback, one table row per case.
package enforcement
