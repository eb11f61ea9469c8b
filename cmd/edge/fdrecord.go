package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/lab/fdlab"
)

func fdRecordCmd() *cobra.Command {
	var listen, secret, out, as string
	var duration time.Duration
	cmd := &cobra.Command{
		Use:   "record",
		Short: "Record the heartbeats a node receives into a trace CSV (site,seq,send_ns,recv_ns)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if secret == "" {
				return usageError{errors.New("--secret is required: heartbeats are authenticated")}
			}
			addr, err := net.ResolveUDPAddr("udp", listen)
			if err != nil {
				return usageError{fmt.Errorf("--listen: %w", err)}
			}
			conn, err := net.ListenUDP("udp", addr)
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			w := cmd.OutOrStdout()
			var file *os.File
			if out != "" && out != "-" {
				if file, err = os.Create(out); err != nil {
					return err
				}
				w = file
			}
			ctx := cmd.Context()
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			var mu sync.Mutex
			var rows []fdlab.Arrival
			v := wire.NewVerifier([]byte(secret), 5*time.Second, as)
			err = wire.Receive(ctx, conn, v, func(r wire.Received) {
				mu.Lock()
				rows = append(rows, fdlab.Arrival{Site: r.Node, Seq: r.Seq, Send: r.SendNs, Recv: r.RecvNs})
				mu.Unlock()
			}, nil, nil)
			if err != nil {
				return err
			}
			for reason, n := range v.Rejections() {
				fmt.Fprintf(cmd.ErrOrStderr(), "rejected %d heartbeats: %s\n", n, reason)
			}
			mu.Lock()
			defer mu.Unlock()
			if err := fdlab.WriteTrace(w, rows); err != nil {
				return err
			}
			if file != nil {
				return file.Close()
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:7946", "UDP address to receive heartbeats on")
	f.StringVar(&secret, "secret", "", "cluster secret")
	f.StringVar(&out, "out", "-", "output CSV")
	f.StringVar(&as, "as", "", "node id the heartbeats must be addressed to (empty: any; record one receiver's heartbeats, since a sender numbers them per period, not per receiver)")
	f.DurationVar(&duration, "duration", 0, "stop after this long (0: until interrupted)")
	return cmd
}

func fdSendCmd() *cobra.Command {
	var to, secret, node, toNode string
	var period, duration time.Duration
	cmd := &cobra.Command{
		Use:   "send",
		Short: "Send authenticated heartbeats to an address (to exercise record or a node)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if secret == "" {
				return usageError{errors.New("--secret is required")}
			}
			addr, err := net.ResolveUDPAddr("udp", to)
			if err != nil {
				return usageError{fmt.Errorf("--to: %w", err)}
			}
			conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			ctx := cmd.Context()
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			s := &wire.Sender{Node: node, Incarnation: uint64(time.Now().UnixNano()), Secret: []byte(secret), Period: period}
			return s.Run(ctx, conn, func() map[string]*net.UDPAddr { return map[string]*net.UDPAddr{toNode: addr} })
		},
	}
	f := cmd.Flags()
	f.StringVar(&to, "to", "127.0.0.1:7946", "UDP address to send to")
	f.StringVar(&secret, "secret", "", "cluster secret")
	f.StringVar(&node, "node", "sender", "node id to send as")
	f.StringVar(&toNode, "to-node", "target", "node id of the receiver (a node refuses heartbeats addressed to another id)")
	f.DurationVar(&period, "period", 100*time.Millisecond, "heartbeat period")
	f.DurationVar(&duration, "duration", 0, "stop after this long (0: until interrupted)")
	return cmd
}
