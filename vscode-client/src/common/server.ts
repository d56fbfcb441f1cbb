// Creates and starts the language client for `torch-preflight server` (stdio).
import { execFile } from 'node:child_process';
import { LogOutputChannel, Uri, workspace } from 'vscode';
import {
    DidChangeConfigurationNotification,
    LanguageClient,
    LanguageClientOptions,
    RevealOutputChannelOn,
    ServerOptions,
    TransportKind,
} from 'vscode-languageclient/node';
import { CONFIG_SECTIONS, SERVER_ID, SERVER_NAME } from './constants';
import { DiscoveredPython, PYTHON_VERSION_CHECK, ServerCommand, installHint, pythonCandidates, serverArgs, toServerSettings } from './serverOptions';
import { getExtensionSettings } from './settings';

export const DOCUMENT_SELECTOR = [
    { scheme: 'file', language: 'python' },
    { scheme: 'untitled', language: 'python' },
    { scheme: 'vscode-notebook-cell', language: 'python' },
];

export interface ProcessResult {
    code: number | null;
    stdout: string;
    stderr: string;
    error?: NodeJS.ErrnoException;
}

export function run(command: string, args: string[], cwd: string | undefined, timeoutMs: number, env?: Record<string, string>): Promise<ProcessResult> {
    return new Promise((resolve) => {
        const options = { cwd, timeout: timeoutMs, maxBuffer: 32 * 1024 * 1024, windowsHide: true, env: { ...process.env, ...env } };
        execFile(command, args, options, (error, stdout, stderr) => {
            const err = error as (NodeJS.ErrnoException & { code?: number | string }) | null;
            const code = err ? (typeof err.code === 'number' ? err.code : null) : 0;
            resolve({ code, stdout: String(stdout), stderr: String(stderr), error: err ?? undefined });
        });
    });
}

/** Checks that `<cmd> server --help` runs; returns undefined, or the reason it does not. */
export async function probeServer(cmd: ServerCommand, cwd?: string): Promise<string | undefined> {
    const result = await run(cmd.command, [...serverArgs(cmd), '--help'], cwd, 30_000, cmd.env);
    if (result.code === 0) {
        return undefined;
    }
    if (result.error?.code === 'ENOENT') {
        return `"${cmd.command}" was not found`;
    }
    const lastLine = result.stderr.trim().split(/\r?\n/).pop() ?? '';
    return lastLine || result.error?.message || `exit code ${String(result.code)}`;
}

/**
 * The first Python >= 3.11 among the Python extension's active interpreter (when given) and the
 * usual names on PATH; undefined when there is none.
 */
export async function discoverPython(fromExtension: string[] | undefined): Promise<DiscoveredPython | undefined> {
    const candidates: DiscoveredPython[] = [
        ...(fromExtension && fromExtension.length > 0 ? [{ argv: fromExtension, source: 'python-extension' as const }] : []),
        ...pythonCandidates(process.platform).map((argv) => ({ argv, source: 'found' as const })),
    ];
    for (const candidate of candidates) {
        const result = await run(candidate.argv[0], [...candidate.argv.slice(1), '-c', PYTHON_VERSION_CHECK], undefined, 10_000);
        if (result.code === 0) {
            return candidate;
        }
    }
    return undefined;
}

export function createClient(cmd: ServerCommand, cwd: string | undefined, output: LogOutputChannel): LanguageClient {
    const serverOptions: ServerOptions = {
        command: cmd.command,
        args: serverArgs(cmd),
        options: { cwd, env: { ...process.env, PYTHONUNBUFFERED: '1', ...cmd.env } },
        transport: TransportKind.stdio,
    };
    const clientOptions: LanguageClientOptions = {
        documentSelector: DOCUMENT_SELECTOR,
        outputChannel: output,
        traceOutputChannel: output,
        revealOutputChannelOn: RevealOutputChannelOn.Never,
        initializationOptions: toServerSettings(getExtensionSettings(workspace.workspaceFolders?.[0])),
        middleware: {
            workspace: {
                // Answer our section with the normalised settings of the requested scope.
                configuration: async (params, token, next) => {
                    const answers = await next(params, token);
                    if (!Array.isArray(answers)) {
                        return answers;
                    }
                    return params.items.map((item, i) =>
                        item.section !== undefined && CONFIG_SECTIONS.includes(item.section)
                            ? toServerSettings(getExtensionSettings(item.scopeUri ? Uri.parse(item.scopeUri) : undefined))
                            : answers[i],
                    );
                },
            },
        },
    };
    return new LanguageClient(SERVER_ID, SERVER_NAME, serverOptions, clientOptions);
}

/**
 * Tells a running server that settings changed. `settings: null` makes it pull them with
 * workspace/configuration, which the middleware above answers per scope (the pull model).
 */
export async function sendConfiguration(client: LanguageClient): Promise<void> {
    await client.sendNotification(DidChangeConfigurationNotification.type, { settings: null });
}

export { installHint };
