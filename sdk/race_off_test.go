//go:build !race

package sdk_test

// raceBuild: see race_on_test.go.
const raceBuild = false
