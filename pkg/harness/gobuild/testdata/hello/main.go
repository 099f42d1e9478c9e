// Command hello is what TestBuild builds.
package main

import "fmt"

func main() { fmt.Println("hello from a built command") }
