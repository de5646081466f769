// T-SQL model gate: builds a DacFx TSqlModel from every migration (V<n>__*.sql) and logic (R__*.sql) script at the
// top of a folder, once per target platform (SQL Server 2022 = Sql160, and Azure SQL Database = SqlAzure), and
// validates it. Unlike the parse gate it resolves names: a column, table, procedure, type or index hint that does
// not exist is reported. Prints "file:line:column: platform: SQLnnnnn: message" per finding; exits 1 on any error,
// on any unresolved-reference warning not allowed by name, and when an object the scripts create is missing from the
// model; exits 0 with a one-line summary otherwise; 2 on bad usage.
//
// DacFx traps handled here:
// - AddObjects only takes object definitions, and silently drops CREATE OR ALTER: the header is rewritten to CREATE
//   (same length, so columns stay put) and every created object is then looked up in the model by name.
// - SET statements, IF guards around a CREATE (IF OBJECT_ID(...) IS NULL CREATE TABLE ...; IF ... EXEC (N'CREATE
//   SCHEMA ...')) and GO separators are not model objects: SET is skipped, guarded CREATEs and EXEC'd literal DDL are
//   unwrapped, GO splits batches. Any other top-level statement is reported (the model cannot see what it does).
// - Each statement is added with its file as the source name, padded with the lines and columns that precede it,
//   so DacFx's line numbers are the file's own.
// - DacFx needs ICU (InvariantGlobalization=false in the csproj).
//
// usage: tsql-model-gate <folder> [--allow <file>]
//   --allow: lines "SQLnnnnn <text that the message contains>" (# comments) naming deliberate warnings to accept.
using System.Text;
using System.Text.RegularExpressions;
using Microsoft.SqlServer.Dac.Model;
using Microsoft.SqlServer.TransactSql.ScriptDom;

string? folderArg = null;
string? allowFile = null;
for (var i = 0; i < args.Length; i++)
{
    if (args[i] == "--allow" && i + 1 < args.Length) allowFile = args[++i];
    else if (folderArg is null && !args[i].StartsWith("--")) folderArg = args[i];
    else return Usage();
}
if (folderArg is null) return Usage();

var root = Path.GetFullPath(folderArg);
if (!Directory.Exists(root))
{
    Console.Error.WriteLine($"tsql-model-gate: folder not found: {folderArg}");
    return 2;
}

var allowed = new List<(string Code, string Text)>();
if (allowFile is not null)
{
    if (!File.Exists(allowFile))
    {
        Console.Error.WriteLine($"tsql-model-gate: allow-list not found: {allowFile}");
        return 2;
    }
    foreach (var raw in File.ReadAllLines(allowFile))
    {
        var line = raw.Trim();
        if (line.Length == 0 || line.StartsWith('#')) continue;
        var sp = line.IndexOf(' ');
        if (sp < 0) { Console.Error.WriteLine($"tsql-model-gate: allow-list line needs a code and a text: {line}"); return 2; }
        allowed.Add((line[..sp], line[(sp + 1)..].Trim()));
    }
}

// The same files the migration runner applies: V<n>__name.sql and R__name.sql at the top of the folder.
var scriptName = new Regex(@"^(V\d+|R)__[A-Za-z0-9_]+\.sql$");
var files = Directory.EnumerateFiles(root, "*.sql", SearchOption.TopDirectoryOnly)
    .Where(f => scriptName.IsMatch(Path.GetFileName(f)))
    // Apply order: versioned files by version, then repeatable ones by name (a later CREATE OR ALTER wins).
    .OrderBy(f => Path.GetFileName(f).StartsWith('R') ? 1 : 0)
    .ThenBy(f => Path.GetFileName(f).StartsWith('V') ? long.Parse(Regex.Match(Path.GetFileName(f), @"^V(\d+)").Groups[1].Value) : 0)
    .ThenBy(f => f, StringComparer.Ordinal)
    .ToList();
if (files.Count == 0)
{
    Console.Error.WriteLine($"tsql-model-gate: no V__*.sql or R__*.sql files in {folderArg}");
    return 1;
}

var cwd = Directory.GetCurrentDirectory();
string Display(string f) => Path.GetRelativePath(cwd, f).Replace('\\', '/');

// One modelling script per object definition, padded with the lines and columns that precede it in its file so
// that DacFx's positions are the file's own. DacFx keys objects by source name (AddOrUpdateObjects with a name it has
// seen replaces that name's objects) and wants one statement per batch, so each definition gets its own name,
// "<file>|<n>"; the "|<n>" is cut off again when a message is printed.
var sources = new List<(string Source, string Script, List<Created> Creates)>();
var indexDefined = new Dictionary<string, string>(); // "table.index" -> the source that defines it now
var defined = new Dictionary<string, string>(); // kind:name -> source of its current definition
var findings = new List<string>();
foreach (var file in files)
{
    var display = Display(file);
    var text = File.ReadAllText(file).Replace("\r\n", "\n").Replace('\r', '\n');
    var parser = new TSql160Parser(initialQuotedIdentifiers: true);
    var fragment = parser.Parse(new StringReader(text), out IList<ParseError> errors);
    foreach (var e in errors) findings.Add($"{display}:{e.Line}:{e.Column}: parse: {e.Message}");
    if (errors.Count > 0 || fragment is not TSqlScript script) continue;
    var pieces = new List<Piece>();
    foreach (var batch in script.Batches)
        foreach (var st in batch.Statements)
            Collect(display, text, st, findings, pieces);
    var n = 0;
    foreach (var p in pieces)
    {
        // A guarded CREATE (IF SCHEMA_ID(...) IS NULL ...) of something an earlier file made is a no-op when applied;
        // a CREATE OR ALTER of it replaces the earlier definition. A plain second CREATE stays: DacFx reports it.
        var key = p.Creates.Select(c => $"{c.Kind}:{c.Name}".ToLowerInvariant()).FirstOrDefault();
        if (key is not null && defined.TryGetValue(key, out var earlier))
        {
            if (p.Guarded) continue;
            if (p.OrAlter) sources.RemoveAll(x => x.Source == earlier);
        }
        if (key is not null) defined[key] = $"{display}|{n + 1}";
        // CREATE INDEX ... WITH (DROP_EXISTING = ON) in a later migration redefines an index an earlier file made:
        // the model takes the new definition only.
        if (p.IndexKey is not null)
        {
            if (p.DropExisting && indexDefined.TryGetValue(p.IndexKey, out var replaced)) sources.RemoveAll(x => x.Source == replaced);
            indexDefined[p.IndexKey] = $"{display}|{n + 1}";
        }
        var before = text[..p.Offset];
        var line = before.Count(c => c == '\n');
        var column = p.Offset - (before.LastIndexOf('\n') + 1);
        sources.Add(($"{display}|{++n}", new string('\n', line) + new string(' ', column) + p.Text, p.Creates));
    }
    // DROP INDEX [IF EXISTS] i ON t in a later migration: the model no longer has the index an earlier file made.
    foreach (var (line, key) in IndexDrops.Seen)
    {
        if (indexDefined.Remove(key, out var dropped)) sources.RemoveAll(x => x.Source == dropped);
        else findings.Add($"{display}:{line}:1: DROP INDEX {key}: no earlier script creates that index");
    }
    IndexDrops.Seen.Clear();
    // ALTER TABLE t DROP CONSTRAINT c in a later migration: the constraint leaves the script of an earlier file that
    // made it (blanked out of t's CREATE TABLE, so positions stay, or its ALTER TABLE ... ADD CONSTRAINT dropped), so
    // a new constraint of that name or a new primary key does not meet the old one in the model.
    foreach (var (line, table, constraint) in ConstraintDrops.Seen)
    {
        var earlier = (string source) => !source.StartsWith(display + "|", StringComparison.Ordinal);
        var i = sources.FindIndex(x => earlier(x.Source) && x.Creates.Any(c => c.Kind == "Table" && string.Equals(c.Name, table, StringComparison.OrdinalIgnoreCase)));
        var blanked = i < 0 ? null : WithoutConstraint(sources[i].Script, constraint);
        if (blanked is not null)
        {
            sources[i] = (sources[i].Source, blanked, sources[i].Creates);
            continue;
        }
        var added = sources.FindIndex(x => earlier(x.Source) && AddsConstraint(x.Script, table, constraint));
        if (added >= 0) sources.RemoveAt(added);
        else findings.Add($"{display}:{line}:1: DROP CONSTRAINT {constraint}: no earlier script of table {table} creates it");
    }
    ConstraintDrops.Seen.Clear();
}

foreach (var (where, line, table, columns) in TableAdditions.Seen)
{
    var i = sources.FindIndex(x => x.Creates.Any(c => c.Kind == "Table" && string.Equals(c.Name, table, StringComparison.OrdinalIgnoreCase)));
    var close = i < 0 ? -1 : sources[i].Script.LastIndexOf(')');
    if (close < 0)
    {
        findings.Add($"{where}:{line}:1: ALTER TABLE {table} ADD ...: no script creates table {table}");
        continue;
    }
    var created = sources[i];
    sources[i] = (created.Source, created.Script[..close] + ",\n  " + string.Join(",\n  ", columns) + "\n" + created.Script[close..], created.Creates);
}

var createdTables = sources.SelectMany(s => s.Creates).Where(c => c.Kind == "Table").Select(c => c.Name).ToHashSet(StringComparer.OrdinalIgnoreCase);
foreach (var (where, line, table) in TableOptions.Seen)
    if (!createdTables.Contains(table)) findings.Add($"{where}:{line}:1: ALTER TABLE {table} SET (...): no script creates table {table}");

if (findings.Count > 0)
{
    foreach (var f in findings) Console.WriteLine(f);
    Console.WriteLine($"tsql-model-gate: {findings.Count} problem(s) before modelling {files.Count} file(s) in {folderArg}");
    return 1;
}

var platforms = new[] { SqlServerVersion.Sql160, SqlServerVersion.SqlAzure };
var problems = 0;
var summary = new List<string>();
var accepted = 0;
foreach (var platform in platforms)
{
    using var model = new TSqlModel(platform, new TSqlModelOptions());
    foreach (var (source, script, _) in sources)
    {
        try
        {
            model.AddOrUpdateObjects(script, source, new TSqlObjectOptions { AnsiNulls = true, QuotedIdentifier = true });
        }
        catch (DacModelException e)
        {
            foreach (var m in e.Messages)
                Console.WriteLine($"{FileOf(source)}: {platform}: {m.Prefix}{m.Number}: {m.Message}");
            problems += Math.Max(1, e.Messages.Count());
        }
    }

    // Every object the scripts create must be in the model (CREATE OR ALTER and unsupported forms drop silently).
    // (Type classes are read here: DacFx fills them in when the first model is made.)
    var expected = sources.SelectMany(s => s.Creates).ToList();
    foreach (var (kindName, name, source, line) in expected)
    {
        var kind = KindOf(kindName);
        var id = new ObjectIdentifier(name.Split('.'));
        if (model.GetObject(kind, id, DacQueryScopes.UserDefined) is null)
        {
            Console.WriteLine($"{source}:{line}:1: {platform}: {kindName} {name} is created here but is not in the model");
            problems++;
        }
    }

    foreach (var e in model.GetModelErrors())
    {
        Console.WriteLine($"{FileOf(e.SourceName)}:{e.Line}:{e.Column}: {platform}: {e.Prefix}{e.ErrorCode}: {e.Message}");
        problems++;
    }

    var seen = new HashSet<string>();
    foreach (var m in model.Validate())
    {
        if (!seen.Add(m.Message)) continue; // DacFx repeats a message once per reference
        var where = Locate(model, m.Message);
        var code = $"{m.Prefix}{m.Number}";
        var isError = m.MessageType == Microsoft.SqlServer.Dac.DacMessageType.Error;
        // SQL71502/71501/71562..: unresolved references are warnings in DacFx; they are errors for this gate.
        var isUnresolved = m.Number is 71501 or 71502 or 71561 or 71562 or 71508;
        if (!isError && !isUnresolved) continue;
        if (!isError && allowed.Any(a => a.Code == code && m.Message.Contains(a.Text, StringComparison.Ordinal)))
        {
            accepted++;
            continue;
        }
        Console.WriteLine($"{where}: {platform}: {code}: {m.Message}");
        problems++;
    }

    var procs = model.GetObjects(DacQueryScopes.UserDefined, Procedure.TypeClass).Count();
    var tables = model.GetObjects(DacQueryScopes.UserDefined, Table.TypeClass).Count();
    summary.Add($"{platform}: {tables} table(s), {procs} procedure(s)");
}

var expected0 = sources.Sum(s => s.Creates.Count);
if (problems > 0)
{
    Console.WriteLine($"tsql-model-gate: {problems} problem(s) in {files.Count} file(s) in {folderArg}");
    return 1;
}
Console.WriteLine($"tsql-model-gate: OK, {files.Count} file(s), {expected0} object(s) per model; {string.Join("; ", summary)}{(accepted > 0 ? $"; {accepted} allowed warning(s)" : "")}");
return 0;

static int Usage()
{
    Console.Error.WriteLine("usage: tsql-model-gate <folder> [--allow <file>]");
    return 2;
}

// Adds the model-relevant part of one top-level statement, or a finding when it cannot be modelled.
static void Collect(string display, string text, TSqlStatement st, List<string> findings, List<Piece> into, bool guarded = false)
{
    switch (st)
    {
        case SetOnOffStatement:
        case SetTransactionIsolationLevelStatement:
            return; // SET ANSI_NULLS / QUOTED_IDENTIFIER / XACT_ABORT ...: session settings, not objects
        case AlterTableSetStatement options:
            // ALTER TABLE t SET (LOCK_ESCALATION = ...): a table option, nothing a reference could miss. DacFx refuses
            // it as a script of its own (SQL71001, and every later object fails with it), so it is not modelled;
            // its table must still be one the scripts create (checked once every file is read).
            TableOptions.Seen.Add((display, st.StartLine, string.Join('.', new[] { options.SchemaObjectName.SchemaIdentifier?.Value, options.SchemaObjectName.BaseIdentifier.Value }.Where(x => x is not null))));
            return;
        case AlterTableAddTableElementStatement add when add.Definition.ColumnDefinitions.Count > 0
                                                        && add.Definition.TableConstraints.Count == 0
                                                        && add.Definition.Indexes.Count == 0:
            // ALTER TABLE t ADD <columns> (a later migration's new columns): DacFx models a table only as its CREATE
            // TABLE, so the columns are spliced into the script that creates t once every file is read: the model
            // sees each table as it is after every migration ran.
            TableAdditions.Seen.Add((display, st.StartLine,
                string.Join('.', new[] { add.SchemaObjectName.SchemaIdentifier?.Value, add.SchemaObjectName.BaseIdentifier.Value }.Where(x => x is not null)),
                add.Definition.ColumnDefinitions.Select(c => text.Substring(c.StartOffset, c.FragmentLength)).ToList()));
            return;
        case AlterTableDropTableElementStatement dropped when dropped.AlterTableDropTableElements.All(e => e.TableElementType == TableElementType.Constraint):
            foreach (var e in dropped.AlterTableDropTableElements)
                ConstraintDrops.Seen.Add((st.StartLine, string.Join('.', new[] { dropped.SchemaObjectName.SchemaIdentifier?.Value, dropped.SchemaObjectName.BaseIdentifier.Value }.Where(x => x is not null)), e.Name.Value));
            return;
        case DropIndexStatement drop when drop.DropIndexClauses.All(c => c is DropIndexClause):
            foreach (DropIndexClause c in drop.DropIndexClauses)
                IndexDrops.Seen.Add((st.StartLine, $"{string.Join('.', new[] { c.Object.SchemaIdentifier?.Value, c.Object.BaseIdentifier.Value }.Where(x => x is not null))}.{c.Index.Value}".ToLowerInvariant()));
            return;
        case IfStatement ifs when ifs.ElseStatement is null:
            // IF <not there yet> CREATE ...: the guard is for re-runs; the model takes the CREATE.
            Collect(display, text, ifs.ThenStatement, findings, into, guarded: true);
            return;
        case BeginEndBlockStatement block:
            foreach (var inner in block.StatementList.Statements) Collect(display, text, inner, findings, into, guarded);
            return;
        case ExecuteStatement exec when LiteralDdl(exec) is string ddl:
        {
            // EXEC (N'CREATE SCHEMA keel ...'): the literal goes where the EXEC stood.
            var parser = new TSql160Parser(initialQuotedIdentifiers: true);
            var inner = parser.Parse(new StringReader(ddl), out IList<ParseError> errors);
            var x = errors.Count == 0 && inner is TSqlScript s && s.Batches.Count == 1 && s.Batches[0].Statements.Count == 1
                ? s.Batches[0].Statements[0] : null;
            var piece = x is null ? null : Piece.From(display, ddl, x);
            if (piece is null || ddl.Contains('\n') || ddl.Length > st.FragmentLength)
            {
                findings.Add($"{display}:{st.StartLine}:{st.StartColumn}: the EXEC'd literal is not one single-line object definition, so the model cannot check it");
                return;
            }
            into.Add(new Piece(st.StartOffset, piece.Text, piece.Creates.Select(c => c with { Source = display, Line = st.StartLine }).ToList()) { Guarded = guarded });
            return;
        }
    }
    var p = Piece.From(display, text, st);
    if (p is null)
    {
        var kind = st.GetType().Name.Replace("Statement", "");
        findings.Add($"{display}:{st.StartLine}:{st.StartColumn}: a top-level {kind} statement is not an object definition, so the model cannot check it (move it into a procedure, or guard a CREATE with IF)");
        return;
    }
    into.Add(p with { Guarded = guarded });
}

// DacFx's validation messages name objects, not places: "[keel].[P] has an unresolved reference to object
// [keel].[T].[Col]." The first name is the referencing object (its file and first line come from the model); the
// line reported is the first code line of that object that mentions the unresolved name's last part.
static string Locate(TSqlModel model, string message)
{
    var names = Regex.Matches(message, @"(\[[^\]]+\](?:\.\[[^\]]+\])*)").Select(m => m.Value).ToList();
    if (names.Count == 0) return "(model)";
    var parts = Regex.Matches(names[0], @"\[([^\]]+)\]").Select(m => m.Groups[1].Value).ToArray();
    var owner = model.GetObjects(DacQueryScopes.UserDefined, Procedure.TypeClass, ScalarFunction.TypeClass, TableValuedFunction.TypeClass, View.TypeClass, Table.TypeClass, TableType.TypeClass, DmlTrigger.TypeClass)
        .FirstOrDefault(o => o.Name.Parts.SequenceEqual(parts, StringComparer.OrdinalIgnoreCase));
    var src = owner?.GetSourceInformation();
    if (owner is null || src?.SourceName is null) return "(model)";
    var file = FileOf(src.SourceName);
    var line = src.StartLine;
    var target = names.Count > 1 ? Regex.Matches(names[^1], @"\[([^\]]+)\]").Select(m => m.Groups[1].Value).LastOrDefault() : null;
    if (target is not null && File.Exists(file))
    {
        var lines = File.ReadAllLines(file);
        var span = (owner.GetScript() ?? "").Split('\n').Length;
        var word = new Regex($@"(?<![\w#@]){Regex.Escape(target)}(?!\w)", RegexOptions.IgnoreCase);
        for (var i = src.StartLine - 1; i < Math.Min(lines.Length, src.StartLine - 1 + span); i++)
        {
            var code = Regex.Replace(lines[i].Split("--")[0], "'[^']*'", "''"); // not in comments or string literals
            if (word.IsMatch(code)) { line = i + 1; break; }
        }
    }
    return $"{file}:{line}";
}

// A CREATE TABLE script without the named constraint (column or table level; blanked, so positions stay), or null
// when it has no such constraint.
static string? WithoutConstraint(string script, string constraint)
{
    var parsed = new TSql160Parser(initialQuotedIdentifiers: true).Parse(new StringReader(script), out IList<ParseError> errors);
    if (errors.Count > 0 || parsed is not TSqlScript s || s.Batches.Count != 1 || s.Batches[0].Statements.Count != 1
        || s.Batches[0].Statements[0] is not CreateTableStatement table) return null;
    bool Named(ConstraintDefinition c) => string.Equals(c.ConstraintIdentifier?.Value, constraint, StringComparison.OrdinalIgnoreCase);
    var chars = script.ToCharArray();
    void Blank(int from, int length) { for (var k = from; k < from + length; k++) if (chars[k] != '\n') chars[k] = ' '; }
    var tableLevel = table.Definition.TableConstraints.FirstOrDefault(Named);
    if (tableLevel is not null)
    {
        Blank(tableLevel.StartOffset, tableLevel.FragmentLength);
        var comma = tableLevel.StartOffset - 1;
        while (comma >= 0 && char.IsWhiteSpace(chars[comma])) comma--;
        if (comma >= 0 && chars[comma] == ',') chars[comma] = ' ';
        return new string(chars);
    }
    foreach (var column in table.Definition.ColumnDefinitions)
    {
        var inline = column.Constraints.FirstOrDefault(Named) ?? (column.DefaultConstraint is { } d && Named(d) ? d : null);
        if (inline is null) continue;
        Blank(inline.StartOffset, inline.FragmentLength);
        return new string(chars);
    }
    return null;
}

// Whether a script is ALTER TABLE <table> ADD CONSTRAINT <constraint> (that one constraint only).
static bool AddsConstraint(string script, string table, string constraint)
{
    var parsed = new TSql160Parser(initialQuotedIdentifiers: true).Parse(new StringReader(script), out IList<ParseError> errors);
    return errors.Count == 0 && parsed is TSqlScript s && s.Batches.Count == 1 && s.Batches[0].Statements.Count == 1
        && s.Batches[0].Statements[0] is AlterTableAddTableElementStatement add
        && string.Equals(string.Join('.', new[] { add.SchemaObjectName.SchemaIdentifier?.Value, add.SchemaObjectName.BaseIdentifier.Value }.Where(x => x is not null)), table, StringComparison.OrdinalIgnoreCase)
        && add.Definition.ColumnDefinitions.Count == 0 && add.Definition.Indexes.Count == 0
        && add.Definition.TableConstraints.Count == 1
        && string.Equals(add.Definition.TableConstraints[0].ConstraintIdentifier?.Value, constraint, StringComparison.OrdinalIgnoreCase);
}

static string FileOf(string? source) => source is null ? "(model)" : source.Split('|')[0];

static string? LiteralDdl(ExecuteStatement exec)
{
    if (exec.ExecuteSpecification?.ExecutableEntity is ExecutableStringList list
        && list.Strings.Count == 1 && list.Strings[0] is StringLiteral lit)
    {
        return lit.Value;
    }
    return null;
}

static ModelTypeClass KindOf(string kind) => kind switch
{
    "Procedure" => Procedure.TypeClass,
    "ScalarFunction" => ScalarFunction.TypeClass,
    "TableValuedFunction" => TableValuedFunction.TypeClass,
    "View" => View.TypeClass,
    "Table" => Table.TypeClass,
    "TableType" => TableType.TypeClass,
    "Sequence" => Sequence.TypeClass,
    "Schema" => Schema.TypeClass,
    "Role" => Role.TypeClass,
    "DmlTrigger" => DmlTrigger.TypeClass,
    _ => throw new ArgumentException(kind),
};

record Created(string Kind, string Name, string Source, int Line);

// ALTER TABLE ... ADD <columns> statements seen: (file, line, table, each column's definition text).
static class TableAdditions
{
    public static readonly List<(string Display, int Line, string Table, List<string> Columns)> Seen = new();
}

// DROP INDEX statements of the file being read: (line, "table.index" in lower case).
static class IndexDrops
{
    public static readonly List<(int Line, string Key)> Seen = new();
}

// ALTER TABLE ... DROP CONSTRAINT statements of the file being read: (line, table, constraint).
static class ConstraintDrops
{
    public static readonly List<(int Line, string Table, string Constraint)> Seen = new();
}

// ALTER TABLE ... SET (...) statements seen: (file, line, table).
static class TableOptions
{
    public static readonly List<(string Display, int Line, string Table)> Seen = new();
}

// An object definition's text and its offset in the file. CREATE OR ALTER is rewritten to CREATE padded with blanks,
// so the text keeps its length and every later line and column stays where it was.
record Piece(int Offset, string Text, List<Created> Creates)
{
    public bool Guarded { get; init; }
    public bool OrAlter { get; init; }
    public string? IndexKey { get; init; } // CREATE INDEX: "table.index", lower case
    public bool DropExisting { get; init; } // ... WITH (DROP_EXISTING = ON)

    public static Piece? From(string source, string text, TSqlStatement st)
    {
        var creates = new List<Created>();
        var name = (SchemaObjectName? n) => n is null ? "" : string.Join('.', new[] { n.SchemaIdentifier?.Value, n.BaseIdentifier?.Value }.Where(x => x is not null));
        void Add(string kind, string n) => creates.Add(new(kind, n, source, st.StartLine));
        switch (st)
        {
            case CreateOrAlterProcedureStatement p: Add("Procedure", name(p.ProcedureReference.Name)); break;
            case CreateProcedureStatement p: Add("Procedure", name(p.ProcedureReference.Name)); break;
            case CreateOrAlterFunctionStatement f: Add(f.ReturnType is ScalarFunctionReturnType ? "ScalarFunction" : "TableValuedFunction", name(f.Name)); break;
            case CreateFunctionStatement f: Add(f.ReturnType is ScalarFunctionReturnType ? "ScalarFunction" : "TableValuedFunction", name(f.Name)); break;
            case CreateOrAlterViewStatement v: Add("View", name(v.SchemaObjectName)); break;
            case CreateViewStatement v: Add("View", name(v.SchemaObjectName)); break;
            case CreateTableStatement t when !t.SchemaObjectName.BaseIdentifier.Value.StartsWith('#'): Add("Table", name(t.SchemaObjectName)); break;
            case CreateTypeTableStatement t: Add("TableType", name(t.Name)); break;
            case CreateSequenceStatement s: Add("Sequence", name(s.Name)); break;
            case CreateSchemaStatement s: Add("Schema", s.Name.Value); break;
            case CreateRoleStatement r: Add("Role", r.Name.Value); break;
            case CreateOrAlterTriggerStatement t: Add("DmlTrigger", name(t.Name)); break;
            case CreateTriggerStatement t: Add("DmlTrigger", name(t.Name)); break;
            case CreateIndexStatement:
            case GrantStatement:
            case DenyStatement:
            case RevokeStatement:
            case AlterRoleStatement:
            case AlterTableStatement:
                break; // modelled, and checked through Validate (the index's table, the grant's object ...)
            default:
                return null;
        }
        var body = text.Substring(st.StartOffset, st.FragmentLength);
        if (st is CreateOrAlterProcedureStatement or CreateOrAlterFunctionStatement or CreateOrAlterViewStatement or CreateOrAlterTriggerStatement)
        {
            body = Regex.Replace(body, @"^CREATE(\s+)OR(\s+)ALTER\b",
                m => "CREATE" + Blank(m.Groups[1].Value) + "  " + Blank(m.Groups[2].Value) + "     ", RegexOptions.IgnoreCase);
        }
        var orAlter = st is CreateOrAlterProcedureStatement or CreateOrAlterFunctionStatement or CreateOrAlterViewStatement or CreateOrAlterTriggerStatement;
        var index = st as CreateIndexStatement;
        return new Piece(st.StartOffset, body, creates)
        {
            OrAlter = orAlter,
            IndexKey = index is null ? null : $"{name(index.OnName)}.{index.Name.Value}".ToLowerInvariant(),
            DropExisting = index?.IndexOptions.Any(o => o is IndexStateOption { OptionKind: IndexOptionKind.DropExisting, OptionState: OptionState.On }) ?? false,
        };
    }

    static string Blank(string ws) => new string(ws.Select(c => c == '\n' ? '\n' : ' ').ToArray());
}
