// Package nameset is an immutable sorted set of names, interned: holders of the same names share one set,
// and a change made to one set is found again by the next holder making it.
package nameset
