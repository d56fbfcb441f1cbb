// Pure logic: extension settings -> how to start the server and what settings to send it.
// No `vscode` import here, so the unit tests run under plain Node (src/test/*.test.ts).

/**
 * Which torch-preflight the launcher imports: the copy bundled in the .vsix first (`useBundled`),
 * or the interpreter's own installation first, the bundle as the fallback (`fromEnvironment`).
 */
export type ImportStrategy = 'useBundled' | 'fromEnvironment';
export const IMPORT_STRATEGIES: readonly ImportStrategy[] = ['useBundled', 'fromEnvironment'];
/** The environment variable bundled/tool/launch.py reads the strategy from. */
export const IMPORT_STRATEGY_ENV = 'TORCH_PREFLIGHT_IMPORT_STRATEGY';
/** Exits 0 on a Python that can run the bundled server. */
export const PYTHON_VERSION_CHECK = 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)';

/** The `torchPreflight.*` settings of one workspace folder, as read from VS Code. */
export interface ExtensionSettings {
    /** Python interpreter (plus arguments) that runs the server. */
    interpreter: string[];
    /** The torch-preflight executable (plus arguments); `server` is appended. */
    path: string[];
    importStrategy: ImportStrategy;
    select: string[];
    ignore: string[];
    /** e.g. "24GiB"; null or "" when unset. */
    gpuMemory: string | null;
    /** e.g. "a100-80gb"; null or "" when unset. */
    gpu: string | null;
    inlayHintsEnabled: boolean;
}

/** The settings object the server reads (section "torchPreflight"). */
export interface ServerSettings {
    select: string[];
    ignore: string[];
    gpuMemory?: string;
    gpu?: string;
    inlayHints: { enabled: boolean };
}

/** Who chose the command: a setting, the Python extension, a search of PATH, or nobody. */
export type CommandSource = 'path' | 'interpreter' | 'python-extension' | 'found' | 'PATH' | 'none';

export interface ServerCommand {
    command: string;
    /** Arguments before the subcommand (the launcher script for an interpreter). */
    prefix: string[];
    source: CommandSource;
    /** Extra environment variables for the process. */
    env?: Record<string, string>;
}

/** A Python found without a setting: the Python extension's active one, or one on PATH. */
export interface DiscoveredPython {
    argv: string[];
    source: 'python-extension' | 'found';
}

export interface VariableContext {
    workspaceFolder?: string;
    userHome: string;
    env: Record<string, string | undefined>;
}

export const DEFAULT_SETTINGS: ExtensionSettings = {
    interpreter: [],
    path: [],
    importStrategy: 'useBundled',
    select: [],
    ignore: [],
    gpuMemory: null,
    gpu: null,
    inlayHintsEnabled: true,
};

const SIZE_RE = /^\s*[0-9]+(\.[0-9]+)?\s*([kKmMgGtT]i?[bB]?|[bB])?\s*$/;

/** Expands `${workspaceFolder}`, `${userHome}`, `${env:NAME}` and a leading `~`. */
export function resolveVariables(value: string, ctx: VariableContext): string {
    let out = value.replace(/\$\{(workspaceFolder|userHome|env:([A-Za-z_][A-Za-z0-9_]*))\}/g, (whole, name: string, envName?: string) => {
        if (envName !== undefined) {
            return ctx.env[envName] ?? '';
        }
        if (name === 'userHome') {
            return ctx.userHome;
        }
        return ctx.workspaceFolder ?? whole;
    });
    if (out === '~' || out.startsWith('~/') || out.startsWith('~\\')) {
        out = ctx.userHome + out.slice(1);
    }
    return out;
}

function cleanList(values: unknown): string[] {
    if (typeof values === 'string') {
        values = [values];
    }
    if (!Array.isArray(values)) {
        return [];
    }
    return values.filter((v): v is string => typeof v === 'string').map((v) => v.trim()).filter((v) => v.length > 0);
}

function cleanCodes(values: unknown): string[] {
    return [...new Set(cleanList(values).map((v) => v.toUpperCase()))];
}

function cleanOptional(value: unknown): string | undefined {
    return typeof value === 'string' && value.trim().length > 0 ? value.trim() : undefined;
}

/** True when the string reads as a memory size the server accepts ("24GiB", "80 GB", "512MiB"). */
export function isMemorySize(value: string): boolean {
    return SIZE_RE.test(value);
}

export function importStrategy(value: unknown): ImportStrategy {
    return IMPORT_STRATEGIES.includes(value as ImportStrategy) ? (value as ImportStrategy) : 'useBundled';
}

/** Interpreters to try, in order, when no setting names one (each must pass PYTHON_VERSION_CHECK). */
export function pythonCandidates(platform: string): string[][] {
    if (platform === 'win32') {
        return [['py', '-3'], ['python'], ['py', '-3.13'], ['py', '-3.12'], ['py', '-3.11']];
    }
    return [['python3'], ['python'], ['python3.14'], ['python3.13'], ['python3.12'], ['python3.11']];
}

/** True when no setting names the interpreter or the executable, so one must be discovered. */
export function needsDiscovery(settings: Pick<ExtensionSettings, 'interpreter' | 'path'>): boolean {
    return cleanList(settings.path).length === 0 && cleanList(settings.interpreter).length === 0;
}

/**
 * How to start the server, in order of precedence: `torchPreflight.path` (an executable), else an
 * interpreter (`torchPreflight.interpreter`, or the discovered one) running the bundled launcher
 * `launcher` with the import strategy; with none, `fromEnvironment` falls back to
 * `torch-preflight` on PATH, `useBundled` has nothing to run (source 'none').
 */
export function resolveServerCommand(
    settings: Pick<ExtensionSettings, 'interpreter' | 'path' | 'importStrategy'>,
    ctx: VariableContext,
    launcher: string,
    discovered?: DiscoveredPython,
): ServerCommand {
    const path = cleanList(settings.path).map((p) => resolveVariables(p, ctx));
    if (path.length > 0) {
        return { command: path[0], prefix: path.slice(1), source: 'path' };
    }
    const strategy = importStrategy(settings.importStrategy);
    const env = { [IMPORT_STRATEGY_ENV]: strategy };
    const interpreter = cleanList(settings.interpreter).map((p) => resolveVariables(p, ctx));
    const python = interpreter.length > 0 ? { argv: interpreter, source: 'interpreter' as const } : discovered;
    if (python && python.argv.length > 0) {
        return { command: python.argv[0], prefix: [...python.argv.slice(1), launcher], source: python.source, env };
    }
    if (strategy === 'fromEnvironment') {
        return { command: 'torch-preflight', prefix: [], source: 'PATH' };
    }
    return { command: 'python3', prefix: [launcher], source: 'none', env };
}

/** The argument vector that starts the language server over stdio. */
export function serverArgs(cmd: ServerCommand): string[] {
    return [...cmd.prefix, 'server'];
}

/** The argument vector of `torch-preflight estimate FILE --format json`, with the budget settings. */
export function estimateArgs(cmd: ServerCommand, file: string, settings: ExtensionSettings): string[] {
    const args = [...cmd.prefix, 'estimate', file, '--format', 'json'];
    const server = toServerSettings(settings);
    if (server.gpuMemory !== undefined) {
        args.push('--gpu-memory', server.gpuMemory);
    } else if (server.gpu !== undefined) {
        args.push('--gpu', server.gpu);
    }
    return args;
}

/**
 * The settings sent as initializationOptions, in answers to workspace/configuration and in
 * didChangeConfiguration. Unset values are omitted (the server then uses pyproject.toml or its
 * defaults); an unreadable gpuMemory is passed through so the server can warn about it.
 */
export function toServerSettings(settings: ExtensionSettings): ServerSettings {
    const out: ServerSettings = {
        select: cleanCodes(settings.select),
        ignore: cleanCodes(settings.ignore),
        inlayHints: { enabled: settings.inlayHintsEnabled !== false },
    };
    const gpuMemory = cleanOptional(settings.gpuMemory);
    if (gpuMemory !== undefined) {
        out.gpuMemory = gpuMemory;
    }
    const gpu = cleanOptional(settings.gpu);
    if (gpu !== undefined) {
        out.gpu = gpu;
    }
    return out;
}

/** Warnings about settings the extension can judge itself (shown once per change). */
export function settingsWarnings(settings: ExtensionSettings): string[] {
    const warnings: string[] = [];
    const gpuMemory = cleanOptional(settings.gpuMemory);
    if (gpuMemory !== undefined && !isMemorySize(gpuMemory)) {
        warnings.push(`torchPreflight.gpuMemory: cannot read "${gpuMemory}" as a memory size (try "24GiB").`);
    }
    for (const code of [...cleanCodes(settings.select), ...cleanCodes(settings.ignore)]) {
        if (!/^[A-Z]+[0-9]*$/.test(code) && code !== 'ALL') {
            warnings.push(`torchPreflight.select/ignore: "${code}" is not a rule code or prefix such as TPF001 or TPF0.`);
        }
    }
    return warnings;
}

/** Keys whose change needs a new server process; others are sent with didChangeConfiguration. */
export const RESTART_KEYS = ['interpreter', 'path', 'importStrategy'] as const;
/** Keys the server re-reads on didChangeConfiguration. */
export const LIVE_KEYS = ['select', 'ignore', 'gpuMemory', 'gpu', 'inlayHints.enabled'] as const;

export type ConfigChange = 'restart' | 'notify' | 'none';

/**
 * What a configuration change calls for, given `affects(key)` (VS Code's
 * `ConfigurationChangeEvent.affectsConfiguration("torchPreflight." + key)`).
 * `trace.server` is handled by the language client itself.
 */
export function classifyChange(affects: (key: string) => boolean, interpreterChanged = false): ConfigChange {
    if (interpreterChanged || RESTART_KEYS.some((k) => affects(k))) {
        return 'restart';
    }
    if (LIVE_KEYS.some((k) => affects(k))) {
        return 'notify';
    }
    return 'none';
}

/** The message shown when the server cannot be started. */
export function installHint(cmd: ServerCommand, reason: string): string {
    const how =
        cmd.source === 'path'
            ? `Check torchPreflight.path ("${cmd.command}").`
            : cmd.source === 'PATH'
              ? 'No Python interpreter was found and `torch-preflight` is not on PATH. Install Python 3.11 or newer, or set torchPreflight.interpreter, or torchPreflight.path to the executable.'
              : cmd.source === 'none'
                ? 'No Python 3.11 or newer was found on PATH (the bundled server needs one). Install one, or set torchPreflight.interpreter to its path.'
                : `The server needs Python 3.11 or newer: check that "${cmd.command}" is one, or set torchPreflight.interpreter to another.`;
    return `torch-preflight: cannot start the language server with "${[cmd.command, ...serverArgs(cmd)].join(' ')}" (${reason}). ${how}`;
}
