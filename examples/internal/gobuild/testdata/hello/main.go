// Command hello is what gobuild's tests build: a main package with nothing
// but the standard library, which the test binary has compiled already.
package main

import "fmt"

func main() { fmt.Println("hello") }
