package cli

// stele schema register|list|get|delete|compat|config (issue 22,
// docs/schemas.md): the brokers' schema registry, through its Confluent
// REST API on a broker's HTTP port (--http), with franz-go's registry
// client, as any Confluent tool would reach it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/sr"
)

// errIncompatible is stele schema compat's answer for an incompatible
// schema: exit status 1 after the reasons are printed.
var errIncompatible = errors.New("the schema is not compatible")

func newSchemaCmd(g *globalOptions) *cobra.Command {
	return newGroupCmd("schema", "Manage the schema registry: register, list, get, delete and check schemas (Confluent's REST API)",
		newSchemaRegisterCmd(g), newSchemaListCmd(g), newSchemaGetCmd(g), newSchemaDeleteCmd(g), newSchemaCompatCmd(g), newSchemaConfigCmd(g))
}

// schemaClient is a registry client for the --http flag's broker.
func schemaClient(cmd *cobra.Command, g *globalOptions, httpFlag string) (*sr.Client, error) {
	addr, err := httpAddress(cmd, httpFlag)
	if err != nil {
		return nil, err
	}
	hc, err := g.httpClient(0)
	if err != nil {
		return nil, err
	}
	return sr.NewClient(sr.URLs(httpBase(addr)), sr.HTTPClient(hc), sr.UserAgent("stele"))
}

// schemaError says what the registry answered.
func schemaError(what string, err error) error {
	var re *sr.ResponseError
	if errors.As(err, &re) {
		return fmt.Errorf("%s: %s (registry error %d)", what, re.Message, re.ErrorCode)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// schemaFlags are the flags that give a schema: its file, type and
// references.
type schemaFlags struct {
	file string
	typ  string
	refs []string
}

func (f *schemaFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.file, "file", "", "the schema's file (- for stdin)")
	cmd.Flags().StringVar(&f.typ, "type", "AVRO", "the schema's type: AVRO, JSON or PROTOBUF (a .proto file; its imports are --ref NAME=SUBJECT:VERSION with NAME the import path)")
	cmd.Flags().StringArrayVar(&f.refs, "ref", nil, "a reference NAME=SUBJECT:VERSION (repeatable)")
}

func (f *schemaFlags) schema(cmd *cobra.Command) (sr.Schema, error) {
	if f.file == "" {
		return sr.Schema{}, usageErrorf("--file is required: the schema's file (- for stdin)")
	}
	var text []byte
	var err error
	if f.file == "-" {
		text, err = readAllLimited(cmd.InOrStdin())
	} else {
		text, err = os.ReadFile(f.file)
	}
	if err != nil {
		return sr.Schema{}, err
	}
	var t sr.SchemaType
	if err := t.UnmarshalText([]byte(strings.ToUpper(f.typ))); err != nil {
		return sr.Schema{}, usageErrorf("--type %q: AVRO, JSON or PROTOBUF", f.typ)
	}
	s := sr.Schema{Schema: string(text), Type: t}
	for _, r := range f.refs {
		name, rest, ok1 := strings.Cut(r, "=")
		i := strings.LastIndexByte(rest, ':') // a subject may hold ':'
		ok2 := i >= 0
		subject, version := rest, ""
		if ok2 {
			subject, version = rest[:i], rest[i+1:]
		}
		v, err := strconv.Atoi(version)
		if !ok1 || !ok2 || name == "" || subject == "" || err != nil {
			return sr.Schema{}, usageErrorf("--ref %q: want NAME=SUBJECT:VERSION", r)
		}
		s.References = append(s.References, sr.SchemaReference{Name: name, Subject: subject, Version: v})
	}
	return s, nil
}

// readAllLimited reads a schema from r, at most 4 MiB.
func readAllLimited(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, 4<<20+1))
	if len(b) > 4<<20 {
		return nil, usageErrorf("the schema is larger than 4 MiB")
	}
	return b, err
}

func newSchemaRegisterCmd(g *globalOptions) *cobra.Command {
	var httpAddr string
	var sf schemaFlags
	var normalize bool
	cmd := &cobra.Command{
		Use:   "register SUBJECT --file FILE",
		Short: "Register a schema under a subject (its id and version; the same schema again answers the same)",
		Args:  exactArgs("SUBJECT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := sf.schema(cmd)
			if err != nil {
				return err
			}
			cl, err := schemaClient(cmd, g, httpAddr)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if normalize {
				ctx = sr.WithParams(ctx, sr.Normalize)
			}
			ss, err := cl.CreateSchema(ctx, args[0], s)
			if err != nil {
				return schemaError("register", err)
			}
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"subject": ss.Subject, "id": ss.ID, "version": ss.Version})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "subject %s version %d: schema id %d\n", ss.Subject, ss.Version, ss.ID)
			return nil
		},
	}
	sf.add(cmd)
	cmd.Flags().BoolVar(&normalize, "normalize", false, "store and compare the schema in its canonical form")
	cmd.Flags().StringVar(&httpAddr, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	return cmd
}

func newSchemaListCmd(g *globalOptions) *cobra.Command {
	var httpAddr, prefix string
	var deleted bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the subjects, each with its latest version, schema id and type",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := schemaClient(cmd, g, httpAddr)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if deleted {
				ctx = sr.WithParams(ctx, sr.ShowDeleted)
			}
			if prefix != "" {
				ctx = sr.WithParams(ctx, sr.SubjectPrefix(prefix))
			}
			subjects, err := cl.Subjects(ctx)
			if err != nil {
				return schemaError("list", err)
			}
			type row struct {
				Subject  string `json:"subject"`
				Versions []int  `json:"versions"`
				Latest   int    `json:"latest_version"`
				ID       int    `json:"id"`
				Type     string `json:"type"`
			}
			rows := []row{}
			for _, s := range subjects {
				vs, err := cl.SubjectVersions(ctx, s)
				if err != nil {
					return schemaError("list "+s, err)
				}
				latest, err := cl.SchemaByVersion(ctx, s, vs[len(vs)-1])
				if err != nil {
					return schemaError("list "+s, err)
				}
				rows = append(rows, row{Subject: s, Versions: vs, Latest: latest.Version, ID: latest.ID, Type: latest.Type.String()})
			}
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), rows)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "SUBJECT\tVERSIONS\tLATEST\tID\tTYPE")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", r.Subject, len(r.Versions), r.Latest, r.ID, r.Type)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&deleted, "deleted", false, "list soft-deleted subjects and versions too")
	cmd.Flags().StringVar(&prefix, "prefix", "", "only the subjects that start with this")
	cmd.Flags().StringVar(&httpAddr, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	return cmd
}

// parseSchemaVersion reads --version: a number from 1, or latest (-1).
func parseSchemaVersion(s string) (int, error) {
	if s == "latest" {
		return -1, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		return 0, usageErrorf("--version %q: a number from 1, or latest", s)
	}
	return v, nil
}

func newSchemaGetCmd(g *globalOptions) *cobra.Command {
	var httpAddr, version string
	var id int
	cmd := &cobra.Command{
		Use:   "get [SUBJECT] [--version N|latest] [--id ID]",
		Short: "Print a schema: a subject's version, or the schema with an id",
		RunE: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 1) == (id > 0) || len(args) > 1 {
				return usageErrorf("give a SUBJECT or --id, one of them")
			}
			cl, err := schemaClient(cmd, g, httpAddr)
			if err != nil {
				return err
			}
			var ss sr.SubjectSchema
			if id > 0 {
				s, err := cl.SchemaByID(cmd.Context(), id)
				if err != nil {
					return schemaError("get", err)
				}
				ss = sr.SubjectSchema{ID: id, Schema: s}
			} else {
				v, err := parseSchemaVersion(version)
				if err != nil {
					return err
				}
				if ss, err = cl.SchemaByVersion(cmd.Context(), args[0], v); err != nil {
					return schemaError("get", err)
				}
			}
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), ss)
			}
			if ss.Subject != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "subject %s version %d: schema id %d (%s)\n", ss.Subject, ss.Version, ss.ID, ss.Type)
			}
			fmt.Fprintln(cmd.OutOrStdout(), ss.Schema.Schema)
			return nil
		},
	}
	cmd.Flags().StringVar(&version, "version", "latest", "the subject's version: a number, or latest")
	cmd.Flags().IntVar(&id, "id", 0, "the schema's id (instead of a subject)")
	cmd.Flags().StringVar(&httpAddr, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	return cmd
}

func newSchemaDeleteCmd(g *globalOptions) *cobra.Command {
	var httpAddr, version string
	var permanent bool
	cmd := &cobra.Command{
		Use:   "delete SUBJECT [--version N|latest] [--permanent]",
		Short: "Delete a subject, or one of its versions: softly, or for good with --permanent after a soft delete",
		Args:  exactArgs("SUBJECT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := schemaClient(cmd, g, httpAddr)
			if err != nil {
				return err
			}
			how := sr.SoftDelete
			if permanent {
				how = sr.HardDelete
			}
			var deleted []int
			if version == "" {
				if deleted, err = cl.DeleteSubject(cmd.Context(), args[0], how); err != nil {
					return schemaError("delete", err)
				}
			} else {
				v, err := parseSchemaVersion(version)
				if err != nil {
					return err
				}
				if err := cl.DeleteSchema(cmd.Context(), args[0], v, how); err != nil {
					return schemaError("delete", err)
				}
				deleted = []int{v}
			}
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"subject": args[0], "versions": deleted, "permanent": permanent})
			}
			kind := "soft-deleted"
			if permanent {
				kind = "deleted for good"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "subject %s: %s %s\n", args[0], kind, versionsText(deleted))
			return nil
		},
	}
	cmd.Flags().StringVar(&version, "version", "", "only this version (a number, or latest)")
	cmd.Flags().BoolVar(&permanent, "permanent", false, "delete for good (after a soft delete)")
	cmd.Flags().StringVar(&httpAddr, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	return cmd
}

func versionsText(vs []int) string {
	if len(vs) == 1 && vs[0] == -1 {
		return "the latest version"
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.Itoa(v)
	}
	if len(vs) == 1 {
		return "version " + parts[0]
	}
	return "versions " + strings.Join(parts, ", ")
}

func newSchemaCompatCmd(g *globalOptions) *cobra.Command {
	var httpAddr, version string
	var sf schemaFlags
	cmd := &cobra.Command{
		Use:   "compat SUBJECT --file FILE [--version N]",
		Short: "Check whether a schema is compatible with a subject (exit status 1 when it is not)",
		Long: "Check a schema as its registration would be checked, at the subject's compatibility level: against the latest\n" +
			"version, or every live one for the _TRANSITIVE levels. With --version, against that version only.",
		Args: exactArgs("SUBJECT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := sf.schema(cmd)
			if err != nil {
				return err
			}
			cl, err := schemaClient(cmd, g, httpAddr)
			if err != nil {
				return err
			}
			v := -1
			if version != "" {
				if v, err = strconv.Atoi(version); err != nil || v < 1 {
					return usageErrorf("--version %q: a number from 1", version)
				}
			}
			res, err := checkCompat(cmd.Context(), cl, args[0], v, version == "", s)
			if err != nil {
				return schemaError("compat", err)
			}
			if g.jsonOutput() {
				if err := writeJSON(cmd.OutOrStdout(), res); err != nil {
					return err
				}
			} else if res.Is {
				fmt.Fprintf(cmd.OutOrStdout(), "compatible with subject %s\n", args[0])
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "NOT compatible with subject %s:\n", args[0])
				for _, m := range res.Messages {
					fmt.Fprintf(cmd.OutOrStdout(), "  %s\n", m)
				}
			}
			if !res.Is {
				return errIncompatible
			}
			return nil
		},
	}
	sf.add(cmd)
	cmd.Flags().StringVar(&version, "version", "", "check against this version only (a number)")
	cmd.Flags().StringVar(&httpAddr, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	return cmd
}

// checkCompat asks the registry: against every version a registration is
// checked against (all), or against version v.
func checkCompat(ctx context.Context, cl *sr.Client, subject string, v int, all bool, s sr.Schema) (sr.CheckCompatibilityResult, error) {
	ctx = sr.WithParams(ctx, sr.Verbose)
	if all {
		// franz-go asks /compatibility/subjects/{s}/versions for -1.
		return cl.CheckCompatibility(ctx, subject, -1, s)
	}
	return cl.CheckCompatibility(ctx, subject, v, s)
}

func newSchemaConfigCmd(g *globalOptions) *cobra.Command {
	var httpAddr, set string
	var remove bool
	cmd := &cobra.Command{
		Use:   "config [SUBJECT] [--set LEVEL | --delete]",
		Short: "Show or set the compatibility level of the registry, or of a subject",
		Long:  "Levels: BACKWARD (the default), BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE, NONE.",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("unexpected argument %q: want at most SUBJECT", args[1])
			}
			if set != "" && remove {
				return usageErrorf("--set and --delete: one of them")
			}
			subject := ""
			if len(args) == 1 {
				subject = args[0]
			}
			cl, err := schemaClient(cmd, g, httpAddr)
			if err != nil {
				return err
			}
			var res sr.CompatibilityResult
			switch {
			case set != "":
				var l sr.CompatibilityLevel
				if err := l.UnmarshalText([]byte(strings.ToUpper(set))); err != nil {
					return usageErrorf("--set %q: one of BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE, NONE", set)
				}
				res = cl.SetCompatibility(cmd.Context(), sr.SetCompatibility{Level: l}, subject)[0]
			case remove:
				res = cl.ResetCompatibility(cmd.Context(), subject)[0]
			default:
				res = cl.Compatibility(sr.WithParams(cmd.Context(), sr.DefaultToGlobal), subject)[0]
			}
			if res.Err != nil {
				return schemaError("config", res.Err)
			}
			if g.jsonOutput() {
				return writeJSON(cmd.OutOrStdout(), map[string]string{"subject": subject, "compatibility": res.Level.String()})
			}
			what := "the registry"
			if subject != "" {
				what = "subject " + subject
			}
			switch {
			case remove:
				fmt.Fprintf(cmd.OutOrStdout(), "%s: level %s removed\n", what, res.Level)
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", what, res.Level)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&set, "set", "", "set the level")
	cmd.Flags().BoolVar(&remove, "delete", false, "remove the level (a subject's: it follows the registry's again)")
	cmd.Flags().StringVar(&httpAddr, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	return cmd
}
