//go:build race

package sdk_test

// raceBuild says whether the test binary was built with -race: programs
// the tests build take the same flag, so the packages the binary was built
// from come from the build cache instead of being compiled again.
const raceBuild = true
