package main

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/edgecache/edge/config"
	"github.com/edgecache/edge/node"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/rules"
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
	var checkFile string
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "Validate a config file (with the environment applied) and exit",
		// The file as an argument or as -c, as serve, explain and health
		// take it.
		Args: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 1) == (checkFile != "") {
				return fmt.Errorf("config check: give the file once, as an argument or with -c")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			file := checkFile
			if len(args) == 1 {
				file = args[0]
			}
			v, err := config.NewViper(file)
			if err != nil {
				return err
			}
			cfg, err := config.Load(v)
			if err != nil {
				return err
			}
			// The files a start reads: "ok" for a certificate serve then
			// refuses would turn a restart after the check into an outage.
			if err := node.CheckFiles(cfg); err != nil {
				return err
			}
			// As serve warns of them: a misspelt variable is ignored,
			// which "ok" alone would hide.
			for _, w := range slices.Concat(config.UnknownEnv(), config.UnusedKeys(v, cfg), config.Warnings(cfg)) {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
			}
			fmt.Fprintln(cmd.OutOrStdout(), file+": ok")
			return nil
		},
	}
	check.Flags().StringVarP(&checkFile, "config", "c", "", "config file (or give it as the argument)")
	cmd.AddCommand(check)
	cmd.AddCommand(explainCmd())
	return cmd
}

// explainCmd prints what a config does with a URL: its site, the rule
// that matches it, the cache key, the rate limit.
func explainCmd() *cobra.Command {
	var file, method, origin string
	var cookies []string
	c := &cobra.Command{
		Use:   "explain URL",
		Short: "Print what the config does with a URL: site, matching rule, cache key, lifetimes, rate limit",
		Example: "  edge config explain -c config.yaml 'https://shop.example/blog/post?utm_source=x&id=7'\n" +
			"  edge config explain -c config.yaml --cookie wordpress_logged_in_1=x https://shop.example/",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := config.NewViper(file)
			if err != nil {
				return err
			}
			if origin != "" {
				// A file of rules alone names no origin; serve takes it
				// from --origin, and so does this.
				config.SetFlag(v, "origin.url", "origin", origin)
			}
			cfg, err := config.Load(v)
			if err != nil {
				return err
			}
			u, err := url.Parse(args[0])
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("explain: %q is not an absolute http(s) URL", args[0])
			}
			out := cmd.OutOrStdout()
			host, ok := proxy.CanonicalHost(u.Host)
			if !ok {
				return fmt.Errorf("explain: %q is not a host", u.Host)
			}
			site := cfg.SiteFor(strings.Trim(host, "[]"))
			if site == nil {
				fmt.Fprintf(out, "host %s: no site answers it (421 Misdirected Request)\n", host)
				return nil
			}
			fmt.Fprintf(out, "site      %s (origins %s)\n", site.Name, strings.Join(site.Origins, ", "))
			hdr := http.Header{}
			for _, c := range cookies {
				hdr.Add("Cookie", c)
			}
			path := u.EscapedPath()
			if path == "" {
				path = "/"
			}
			rule := site.Rules.ForRequest(strings.ToUpper(method), path, hdr)
			keyRule := site.Rules.ForKey(path, u.RawQuery)
			if keyRule.IsAmbiguousPath() {
				rule = keyRule // the request passes, as the proxy decides (ruling)
			}
			name := "none"
			switch {
			case rule.IsAmbiguousPath() && rules.SpelledAmbiguously(path):
				name = rule.Name + " (the path has dot or empty segments, a backslash or a ';', which origins read differently: passed to the origin, never cached)"
			case rule.IsAmbiguousPath():
				name = rule.Name + " (read in another case, as IIS, ASP.NET Core and Express read paths, it matches a rule that keeps answers apart: passed to the origin, never cached)"
			case rule != nil:
				name = fmt.Sprintf("%s (rules[%d])", rule.Name, rule.Index)
			}
			fmt.Fprintf(out, "rule      %s\n", name)
			for _, line := range rule.Explain() {
				fmt.Fprintf(out, "          %s\n", line)
			}
			query := u.RawQuery
			if cfg.Cache.SortQuery {
				query = proxy.SortedQuery(query)
			}
			key := proxy.CacheKey(proxy.KeyScheme(u.Scheme, cfg.Cache.KeyScheme), host, path, keyRule.KeyQuery(query))
			if len(site.Hosts) != 1 || site.Hosts[0] != "*" {
				key = site.Name + " " + key
			}
			fmt.Fprintf(out, "cache key %s\n", key)
			if keyRule != nil && keyRule.KeyedOnRequest() {
				fmt.Fprintf(out, "          plus the values rule %s adds from each request (headers, cookies, device)\n", keyRule.Name)
			}
			noCache := cfg.Cache.ClientNoCache.String()
			if rule != nil && rule.ClientNoCacheSet {
				noCache = rule.ClientNoCache.String() + " (rule " + rule.Name + ")"
			}
			fmt.Fprintf(out, "no-cache  a client's no-cache / max-age=0: %s\n", noCache)
			if site.RateLimit.Rate > 0 {
				fmt.Fprintf(out, "rate      %g requests/s per client (%s), burst %d\n", site.RateLimit.Rate, site.RateLimit.Key, site.RateLimit.Burst)
			} else {
				fmt.Fprintln(out, "rate      no per-client limit")
			}
			return nil
		},
	}
	c.Flags().StringVarP(&file, "config", "c", "config.yaml", "config file")
	c.Flags().StringVar(&method, "method", "GET", "request method")
	c.Flags().StringVar(&origin, "origin", "", "origin base URL (origin.url), for a file that names none")
	c.Flags().StringArrayVar(&cookies, "cookie", nil, "a Cookie the request carries (repeatable), for rules that match on cookies")
	return c
}
