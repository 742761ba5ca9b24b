package main

import "bytes"

func containsBytes(b, sub []byte) bool { return bytes.Contains(b, sub) }
