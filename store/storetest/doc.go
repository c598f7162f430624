// Package storetest holds the behavioural test suite that every store.Store must
// pass, so that the disk and Redis stores behave the same way. A store's own tests
// call Run with a function that opens a fresh, empty store.
package storetest
