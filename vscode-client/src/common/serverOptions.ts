// Pure logic: extension settings -> how to start the server and what settings to send it.
// No `vscode` import here, so the unit tests run under plain Node (src/test/*.test.ts).

/** The `torchPreflight.*` settings of one workspace folder, as read from VS Code. */
export interface ExtensionSettings {
    /** Python interpreter (plus arguments) that has torch-preflight installed. */
    interpreter: string[];
    /** The torch-preflight executable (plus arguments); `server` is appended. */
    path: string[];
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

export type CommandSource = 'path' | 'interpreter' | 'python-extension' | 'PATH';

export interface ServerCommand {
    command: string;
    /** Arguments before the subcommand (`-m torch_preflight` for an interpreter). */
    prefix: string[];
    source: CommandSource;
}

export interface VariableContext {
    workspaceFolder?: string;
    userHome: string;
    env: Record<string, string | undefined>;
}

export const DEFAULT_SETTINGS: ExtensionSettings = {
    interpreter: [],
    path: [],
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

/**
 * How to start the server, in order of precedence:
 * `torchPreflight.path`, `torchPreflight.interpreter`, the Python extension's active interpreter,
 * then `torch-preflight` on PATH.
 */
export function resolveServerCommand(
    settings: Pick<ExtensionSettings, 'interpreter' | 'path'>,
    ctx: VariableContext,
    pythonExtensionInterpreter?: string[],
): ServerCommand {
    const path = cleanList(settings.path).map((p) => resolveVariables(p, ctx));
    if (path.length > 0) {
        return { command: path[0], prefix: path.slice(1), source: 'path' };
    }
    const interpreter = cleanList(settings.interpreter).map((p) => resolveVariables(p, ctx));
    if (interpreter.length > 0) {
        return { command: interpreter[0], prefix: [...interpreter.slice(1), '-m', 'torch_preflight'], source: 'interpreter' };
    }
    const fromExtension = cleanList(pythonExtensionInterpreter);
    if (fromExtension.length > 0) {
        return { command: fromExtension[0], prefix: [...fromExtension.slice(1), '-m', 'torch_preflight'], source: 'python-extension' };
    }
    return { command: 'torch-preflight', prefix: [], source: 'PATH' };
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
export const RESTART_KEYS = ['interpreter', 'path'] as const;
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
              ? 'No interpreter is configured and `torch-preflight` is not on PATH. Set torchPreflight.interpreter to a Python that has it, or torchPreflight.path to the executable.'
              : `Install it into that interpreter: "${cmd.command}" -m pip install pytorch-preflight, or set torchPreflight.interpreter / torchPreflight.path.`;
    return `torch-preflight: cannot start the language server with "${[cmd.command, ...serverArgs(cmd)].join(' ')}" (${reason}). ${how}`;
}
