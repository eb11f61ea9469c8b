// Command edge is a cooperative CDN edge cache. Its subcommands are thin:
// they parse flags and configuration and call the packages that do the work.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "edge",
		Short:         "A cooperative CDN edge cache",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serveCmd(), originCmd(), versionCmd(), demoCmd(), configCmd(), simCmd(), fdCmd(), loadCmd(), healthCmd(), reloadCmd())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "edge:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError marks errors caused by how the command was called.
type usageError struct{ error }
