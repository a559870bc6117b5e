// Command stele is the Stele broker and its admin tools; see internal/cli.
package main

import (
	"os"

	"github.com/stele-io/stele/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]...))
}
