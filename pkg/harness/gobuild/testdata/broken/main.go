// Command broken does not compile: TestBuild expects the compiler's message.
package main

func main() { undefinedFunction() }
