// Package paceline is the Go client of Paceline's gRPC API (package
// paceline.v1): the generated stubs of every service (package pacelinev1,
// generated from proto/paceline/v1 by clients/build.sh go) plus Connect,
// which dials a server with an optional bearer token and a cluster's own
// certificate authority. Every message, field and RPC is documented in the
// .proto files.
package paceline

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	pb "github.com/paceline/paceline/clients/go/gen/paceline/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// DefaultServer is where `paceline dev` listens.
const DefaultServer = "http://127.0.0.1:7400"

// Options of Connect; empty fields come from the environment.
type Options struct {
	// Server: http://host:port, https://host:port or host:port (plain).
	// Default PACELINE_SERVER, else DefaultServer. A comma-separated list
	// (a highly available cluster) uses its first address.
	Server string
	// Token for a server with a tokens file. Default PACELINE_TOKEN.
	Token string
	// CACert is the PEM file of the authority that signed an https
	// server's certificate. Default PACELINE_CA_CERT. Required for https.
	CACert string
}

// Client holds a stub of every paceline.v1 service over one connection.
type Client struct {
	Conn    *grpc.ClientConn
	Jobs    pb.JobServiceClient
	Tasks   pb.TaskServiceClient
	Pools   pb.PoolServiceClient
	Hosts   pb.HostServiceClient
	Plugins pb.PluginServiceClient
	Watch   pb.WatchServiceClient
}

// bearer sends the token with every call.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity lets the token travel on plain connections too
// (`paceline dev` on loopback); use https elsewhere.
func (b bearer) RequireTransportSecurity() bool { return b.secure }

func env(v, name, fallback string) string {
	if v != "" {
		return v
	}
	if e := os.Getenv(name); e != "" {
		return e
	}
	return fallback
}

// Connect dials a Paceline server.
func Connect(o Options) (*Client, error) {
	server := strings.TrimSpace(strings.Split(env(o.Server, "PACELINE_SERVER", DefaultServer), ",")[0])
	token := env(o.Token, "PACELINE_TOKEN", "")
	caCert := env(o.CACert, "PACELINE_CA_CERT", "")
	var dial []grpc.DialOption
	target := server
	secure := strings.HasPrefix(server, "https://")
	switch {
	case secure:
		if caCert == "" {
			return nil, fmt.Errorf("%s is https: give the authority's certificate (CACert or PACELINE_CA_CERT)", server)
		}
		pem, err := os.ReadFile(caCert)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", caCert, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", caCert)
		}
		target = strings.TrimPrefix(server, "https://")
		dial = append(dial, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})))
	default:
		target = strings.TrimPrefix(server, "http://")
		dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{token: token, secure: secure}))
	}
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", server, err)
	}
	return &Client{
		Conn:    conn,
		Jobs:    pb.NewJobServiceClient(conn),
		Tasks:   pb.NewTaskServiceClient(conn),
		Pools:   pb.NewPoolServiceClient(conn),
		Hosts:   pb.NewHostServiceClient(conn),
		Plugins: pb.NewPluginServiceClient(conn),
		Watch:   pb.NewWatchServiceClient(conn),
	}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.Conn.Close() }
