package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/edgecache/edge/config"
)

func configCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Configuration helpers"}
	cmd.AddCommand(&cobra.Command{
		Use:   "example",
		Short: "Print a documented config.yaml with every key at its default",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprint(cmd.OutOrStdout(), config.Example(config.ShippedOverrides))
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "docs",
		Short: "Print the configuration reference table of docs/operations.md",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprint(cmd.OutOrStdout(), config.Reference())
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Validate a config file (with the environment applied) and exit",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := config.NewViper(args[0])
			if err != nil {
				return err
			}
			if _, err := config.Load(v); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), args[0]+": ok")
			return nil
		},
	})
	return cmd
}
