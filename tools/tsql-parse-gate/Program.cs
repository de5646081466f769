// T-SQL parse gate: parses every *.sql file under a folder (recursively) with the SQL Server 2022 parser
// (TSql160Parser). Prints "file:line:column: message" for each error and exits 1 if there is any;
// otherwise prints a one-line summary (files, batches) and exits 0. Exit 2 on bad usage.
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
    }
}

if (errorCount > 0)
{
    Console.WriteLine($"tsql-parse-gate: {errorCount} error(s) in {files.Count} file(s) under {args[0]}");
    return 1;
}

Console.WriteLine($"tsql-parse-gate: OK, {files.Count} file(s), {batchCount} batch(es) parsed with TSql160Parser under {args[0]}");
return 0;
