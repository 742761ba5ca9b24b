// Command load measures Sextant under a generated mesh: simulated sidecars and ztunnels over ADS, scripted
// config changes, and per-change latency, bytes, server CPU and memory. Run it with `make load`.
package main
