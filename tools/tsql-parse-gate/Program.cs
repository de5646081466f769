// T-SQL parse gate: parses every *.sql file under a folder (recursively) with the SQL Server 2022 parser
// (TSql160Parser). Prints "file:line:column: message" for each error and exits 1 if there is any;
// otherwise prints a one-line summary (files, batches) and exits 0. Exit 2 on bad usage.
//
// Then, on the parsed scripts, the rules below: mistakes only a real server would show (a refused statement, a
// transaction left open by a cut call, a skip-locked read that skips nothing), which no SQL Server here can show.
// Each is reported as "file:line:column: rule: message" and fails the gate like a syntax error.
//  - output-into: DML with an OUTPUT clause without INTO on a table that has a trigger. SQL Server refuses the
//    statement at run time (error 334); OUTPUT ... INTO a table variable is allowed.
//  - xact-abort: a procedure or trigger that begins a transaction without SET XACT_ABORT ON. Without it a cut call
//    (client timeout, attention) leaves the transaction open on the pooled connection, its locks held, and a run-time
//    error does not roll back what came before it.
//  - readpast: a READPAST hint without UPDLOCK (or XLOCK) and READCOMMITTEDLOCK. Under READ_COMMITTED_SNAPSHOT (which
//    Keel requires) a read without READCOMMITTEDLOCK reads row versions and takes no row lock, so READPAST skips
//    nothing a claim holds; without an update lock the rows it returns are not kept until commit.
//  - dynamic-sql: EXEC of a string that is not one literal, or sp_executesql, inside a procedure, function or
//    trigger: input spliced into SQL text (sql/README.md, "Parameters only").
//  - insert-exec: a procedure some module runs through INSERT ... EXEC (its result set into a table) must not run an
//    INSERT ... EXEC itself (error 8164: it cannot be nested), nor ROLLBACK unless under an IF that tests a variable of
//    its own (that it began the transaction): a ROLLBACK inside the caller's INSERT ... EXEC is error 3915, which
//    replaces the real error (a deadlock's 1205 included) in what the client reads.
using Microsoft.SqlServer.TransactSql.ScriptDom;

if (args.Length != 1)
{
    Console.Error.WriteLine("usage: tsql-parse-gate <folder>");
    return 2;
}

var root = Path.GetFullPath(args[0]);
if (!Directory.Exists(root))
{
    Console.Error.WriteLine($"tsql-parse-gate: folder not found: {args[0]}");
    return 2;
}

var files = Directory
    .EnumerateFiles(root, "*.sql", SearchOption.AllDirectories)
    .OrderBy(f => f, StringComparer.Ordinal)
    .ToList();

if (files.Count == 0)
{
    Console.Error.WriteLine($"tsql-parse-gate: no *.sql files under {args[0]}");
    return 1;
}

var errorCount = 0;
var batchCount = 0;
var cwd = Directory.GetCurrentDirectory();
var parsed = new List<(string Display, TSqlScript Script)>();

foreach (var file in files)
{
    var display = Path.GetRelativePath(cwd, file).Replace('\\', '/');
    // initialQuotedIdentifiers: true matches SSMS/sqlcmd/ODBC defaults (SET QUOTED_IDENTIFIER ON).
    var parser = new TSql160Parser(initialQuotedIdentifiers: true);
    using var reader = new StreamReader(file, detectEncodingFromByteOrderMarks: true);
    var fragment = parser.Parse(reader, out IList<ParseError> errors);

    foreach (var e in errors)
    {
        Console.WriteLine($"{display}:{e.Line}:{e.Column}: {e.Message}");
        errorCount++;
    }

    if (errors.Count == 0 && fragment is TSqlScript script)
    {
        batchCount += script.Batches.Count;
        parsed.Add((display, script));
    }
}

if (errorCount > 0)
{
    Console.WriteLine($"tsql-parse-gate: {errorCount} error(s) in {files.Count} file(s) under {args[0]}");
    return 1;
}

// The tables with a trigger, from every script (a trigger may be created in another file than the DML).
var triggered = new List<(SchemaObjectName Table, string Trigger)>();
foreach (var (_, script) in parsed)
{
    var triggers = new TriggerCollector();
    script.Accept(triggers);
    triggered.AddRange(triggers.Found);
}

// The procedures some module runs through INSERT ... EXEC.
var insertExecTargets = new List<SchemaObjectName>();
foreach (var (_, script) in parsed)
{
    var targets = new InsertExecTargets();
    script.Accept(targets);
    insertExecTargets.AddRange(targets.Found);
}

var findings = new List<string>();
foreach (var (display, script) in parsed)
{
    var rules = new RuleVisitor(display, triggered, insertExecTargets, findings);
    script.Accept(rules);
}
foreach (var f in findings) Console.WriteLine(f);
if (findings.Count > 0)
{
    Console.WriteLine($"tsql-parse-gate: {findings.Count} rule violation(s) in {files.Count} file(s) under {args[0]}");
    return 1;
}

Console.WriteLine($"tsql-parse-gate: OK, {files.Count} file(s), {batchCount} batch(es) parsed with TSql160Parser under {args[0]}; rules output-into, xact-abort, readpast, dynamic-sql, insert-exec: OK ({triggered.Count} triggered table(s), {insertExecTargets.Select(Names.Of).Distinct(StringComparer.OrdinalIgnoreCase).Count()} INSERT ... EXEC target(s))");
return 0;

static class Names
{
    public static string Of(SchemaObjectName n) =>
        string.Join('.', new[] { n.SchemaIdentifier?.Value, n.BaseIdentifier?.Value }.Where(x => x is not null));

    // The same table: base names equal, and schemas equal where both are written.
    public static bool Same(SchemaObjectName a, SchemaObjectName b) =>
        string.Equals(a.BaseIdentifier?.Value, b.BaseIdentifier?.Value, StringComparison.OrdinalIgnoreCase)
        && (a.SchemaIdentifier is null || b.SchemaIdentifier is null
            || string.Equals(a.SchemaIdentifier.Value, b.SchemaIdentifier.Value, StringComparison.OrdinalIgnoreCase));
}

sealed class TriggerCollector : TSqlFragmentVisitor
{
    public readonly List<(SchemaObjectName Table, string Trigger)> Found = new();

    public override void Visit(TriggerStatementBody node)
    {
        if (node.TriggerObject?.Name is { } table && node.TriggerObject.TriggerScope == TriggerScope.Normal)
            Found.Add((table, Names.Of(node.Name)));
        base.Visit(node);
    }
}

// The named tables of a FROM clause (through joins and applies), to resolve a DML target written as an alias.
sealed class NamedTables : TSqlFragmentVisitor
{
    public readonly List<NamedTableReference> Found = new();
    public override void Visit(NamedTableReference node) => Found.Add(node);
}

sealed class RuleVisitor(
    string display,
    List<(SchemaObjectName Table, string Trigger)> triggered,
    List<SchemaObjectName> insertExecTargets,
    List<string> findings)
    : TSqlFragmentVisitor
{
    private int moduleDepth; // inside a procedure, function or trigger body

    private void Report(TSqlFragment at, string rule, string message) =>
        findings.Add($"{display}:{at.StartLine}:{at.StartColumn}: {rule}: {message}");

    // --- xact-abort -------------------------------------------------------------------------------------------
    private void CheckXactAbort(TSqlFragment module, string kind, string name)
    {
        var scan = new TransactionScan();
        module.Accept(scan);
        if (scan.Begins.Count > 0 && !scan.XactAbortOn)
            Report(scan.Begins[0], "xact-abort",
                $"{kind} {name} begins a transaction without SET XACT_ABORT ON: a cut call leaves it open on the pooled connection with its locks, and an error does not roll back what ran before it");
    }

    public override void ExplicitVisit(CreateProcedureStatement node) => Module(node, () => base.ExplicitVisit(node));
    public override void ExplicitVisit(CreateOrAlterProcedureStatement node) => Module(node, () => base.ExplicitVisit(node));
    public override void ExplicitVisit(AlterProcedureStatement node) => Module(node, () => base.ExplicitVisit(node));
    public override void ExplicitVisit(CreateTriggerStatement node) => Module(node, () => base.ExplicitVisit(node));
    public override void ExplicitVisit(CreateOrAlterTriggerStatement node) => Module(node, () => base.ExplicitVisit(node));
    public override void ExplicitVisit(AlterTriggerStatement node) => Module(node, () => base.ExplicitVisit(node));
    public override void ExplicitVisit(CreateFunctionStatement node) => Module(node, () => base.ExplicitVisit(node));
    public override void ExplicitVisit(CreateOrAlterFunctionStatement node) => Module(node, () => base.ExplicitVisit(node));
    public override void ExplicitVisit(AlterFunctionStatement node) => Module(node, () => base.ExplicitVisit(node));

    private void Module(TSqlFragment node, Action visitChildren)
    {
        switch (node)
        {
            case ProcedureStatementBody p:
                CheckXactAbort(p, "procedure", Names.Of(p.ProcedureReference.Name));
                if (insertExecTargets.Any(t => Names.Same(t, p.ProcedureReference.Name))) CheckInsertExecTarget(p);
                break;
            case TriggerStatementBody t:
                CheckXactAbort(t, "trigger", Names.Of(t.Name));
                break;
        }
        moduleDepth++;
        try { visitChildren(); }
        finally { moduleDepth--; }
    }

    // --- insert-exec ------------------------------------------------------------------------------------------
    private void CheckInsertExecTarget(ProcedureStatementBody p)
    {
        var name = Names.Of(p.ProcedureReference.Name);
        var nested = new InsertExecTargets();
        p.Accept(nested);
        foreach (var at in nested.Statements)
            Report(at, "insert-exec",
                $"{name} is run through INSERT ... EXEC, so it cannot run an INSERT ... EXEC itself (error 8164: INSERT EXEC cannot be nested)");
        var rollbacks = new RollbackScan();
        p.Accept(rollbacks);
        foreach (var at in rollbacks.Unguarded)
            Report(at, "insert-exec",
                $"{name} is run through INSERT ... EXEC: a ROLLBACK there is error 3915 in its caller, which hides the real error; roll back only under an IF on a variable saying this procedure began the transaction (IF @OwnTran = 1 ...)");
    }

    // --- output-into ------------------------------------------------------------------------------------------
    public override void Visit(UpdateStatement node) { CheckOutput(node.UpdateSpecification, node.UpdateSpecification.FromClause); base.Visit(node); }
    public override void Visit(DeleteStatement node) { CheckOutput(node.DeleteSpecification, node.DeleteSpecification.FromClause); base.Visit(node); }
    public override void Visit(InsertStatement node) { CheckOutput(node.InsertSpecification, null); base.Visit(node); }
    public override void Visit(MergeStatement node) { CheckOutput(node.MergeSpecification, null); base.Visit(node); }

    private void CheckOutput(DataModificationSpecification spec, FromClause? from)
    {
        if (spec.OutputClause is null || spec.Target is not NamedTableReference target) return;
        var table = target.SchemaObject;
        if (from is not null && table.SchemaIdentifier is null)
        {
            // UPDATE h ... FROM keel.JobsHot AS h: the target is the FROM table the name aliases.
            var named = new NamedTables();
            from.Accept(named);
            var aliased = named.Found.FirstOrDefault(t =>
                string.Equals(t.Alias?.Value, table.BaseIdentifier.Value, StringComparison.OrdinalIgnoreCase));
            if (aliased is not null) table = aliased.SchemaObject;
        }
        foreach (var (t, trigger) in triggered)
        {
            if (!Names.Same(t, table)) continue;
            Report(spec.OutputClause, "output-into",
                $"OUTPUT without INTO on {Names.Of(t)}, which has trigger {trigger}: SQL Server refuses the statement (error 334); OUTPUT ... INTO a table variable, then SELECT from it");
            return;
        }
    }

    // --- readpast ---------------------------------------------------------------------------------------------
    public override void Visit(NamedTableReference node)
    {
        var kinds = node.TableHints.Select(h => h.HintKind).ToHashSet();
        if (kinds.Contains(TableHintKind.ReadPast)
            && (!kinds.Contains(TableHintKind.ReadCommittedLock)
                || !(kinds.Contains(TableHintKind.UpdLock) || kinds.Contains(TableHintKind.XLock))))
        {
            Report(node, "readpast",
                $"READPAST on {Names.Of(node.SchemaObject)} needs UPDLOCK (or XLOCK) and READCOMMITTEDLOCK: under READ_COMMITTED_SNAPSHOT a read without READCOMMITTEDLOCK takes no row lock, so READPAST skips nothing another session holds, and without an update lock the rows it returns are not kept until commit");
        }
        base.Visit(node);
    }

    // --- dynamic-sql ------------------------------------------------------------------------------------------
    public override void Visit(ExecuteStatement node)
    {
        if (moduleDepth > 0)
        {
            switch (node.ExecuteSpecification?.ExecutableEntity)
            {
                case ExecutableStringList list when !(list.Strings.Count == 1 && list.Strings[0] is StringLiteral):
                    Report(node, "dynamic-sql", "EXEC of a string built at run time: input spliced into SQL text; call a procedure with parameters");
                    break;
                case ExecutableProcedureReference proc
                    when string.Equals(proc.ProcedureReference?.ProcedureReference?.Name?.BaseIdentifier?.Value, "sp_executesql", StringComparison.OrdinalIgnoreCase):
                    Report(node, "dynamic-sql", "sp_executesql inside a module: SQL text built at run time; write the statement in the procedure");
                    break;
            }
        }
        base.Visit(node);
    }
}

// A module's BEGIN TRANSACTION statements and whether it sets XACT_ABORT ON.
sealed class TransactionScan : TSqlFragmentVisitor
{
    public readonly List<BeginTransactionStatement> Begins = new();
    public bool XactAbortOn;

    public override void Visit(BeginTransactionStatement node) => Begins.Add(node);

    public override void Visit(PredicateSetStatement node)
    {
        if (node.Options.HasFlag(SetOptions.XactAbort) && node.IsOn) XactAbortOn = true;
    }
}

// INSERT ... EXEC statements and the procedures they run.
sealed class InsertExecTargets : TSqlFragmentVisitor
{
    public readonly List<SchemaObjectName> Found = new();
    public readonly List<InsertStatement> Statements = new();

    public override void Visit(InsertStatement node)
    {
        if (node.InsertSpecification?.InsertSource is ExecuteInsertSource source)
        {
            Statements.Add(node);
            if (source.Execute?.ExecutableEntity is ExecutableProcedureReference proc
                && proc.ProcedureReference?.ProcedureReference?.Name is { } name)
                Found.Add(name);
        }
        base.Visit(node);
    }
}

// ROLLBACK statements not under an IF whose condition tests a variable (IF @OwnTran = 1 ...: this procedure began the
// transaction); @@TRANCOUNT alone says nothing of who began it.
sealed class RollbackScan : TSqlFragmentVisitor
{
    private int guarded;
    public readonly List<RollbackTransactionStatement> Unguarded = new();

    public override void ExplicitVisit(IfStatement node)
    {
        node.Predicate?.Accept(this);
        var vars = new VariableRefs();
        node.Predicate?.Accept(vars);
        if (vars.Any) guarded++;
        node.ThenStatement?.Accept(this);
        if (vars.Any) guarded--;
        node.ElseStatement?.Accept(this);
    }

    public override void Visit(RollbackTransactionStatement node)
    {
        if (guarded == 0) Unguarded.Add(node);
    }
}

sealed class VariableRefs : TSqlFragmentVisitor
{
    public bool Any;
    public override void Visit(VariableReference node) => Any = true;
}
