import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
    DEFAULT_SETTINGS,
    ExtensionSettings,
    ImportStrategy,
    classifyChange,
    importStrategy,
    estimateArgs,
    installHint,
    needsDiscovery,
    pythonCandidates,
    resolveServerCommand,
    resolveVariables,
    serverArgs,
    settingsWarnings,
    toServerSettings,
} from '../common/serverOptions';

const ctx = { workspaceFolder: '/ws', userHome: '/home/me', env: { VENV: '/opt/venv' } };
const settings = (over: Partial<ExtensionSettings> = {}): ExtensionSettings => ({ ...DEFAULT_SETTINGS, ...over });

const LAUNCHER = '/ext/bundled/tool/launch.py';
const BUNDLED = { TORCH_PREFLIGHT_IMPORT_STRATEGY: 'useBundled' };

describe('resolveServerCommand', () => {
    it('runs the bundled launcher with the configured interpreter', () => {
        const cmd = resolveServerCommand(settings({ interpreter: ['${workspaceFolder}/.venv/bin/python'] }), ctx, LAUNCHER);
        assert.deepEqual(cmd, { command: '/ws/.venv/bin/python', prefix: [LAUNCHER], source: 'interpreter', env: BUNDLED });
        assert.deepEqual(serverArgs(cmd), [LAUNCHER, 'server']);
    });

    it('keeps interpreter arguments before the launcher', () => {
        const cmd = resolveServerCommand(settings({ interpreter: ['/usr/bin/python3', '-X', 'utf8'] }), ctx, LAUNCHER);
        assert.deepEqual(serverArgs(cmd), ['-X', 'utf8', LAUNCHER, 'server']);
    });

    it('passes fromEnvironment to the launcher, and an unknown strategy reads as useBundled', () => {
        const env = resolveServerCommand(settings({ interpreter: ['/py'], importStrategy: 'fromEnvironment' }), ctx, LAUNCHER);
        assert.deepEqual(env.env, { TORCH_PREFLIGHT_IMPORT_STRATEGY: 'fromEnvironment' });
        const odd = resolveServerCommand(settings({ interpreter: ['/py'], importStrategy: 'bogus' as ImportStrategy }), ctx, LAUNCHER);
        assert.deepEqual(odd.env, BUNDLED);
        assert.equal(importStrategy(undefined), 'useBundled');
    });

    it('prefers torchPreflight.path over the interpreter and appends server', () => {
        const found = { argv: ['/py/ext'], source: 'python-extension' as const };
        const cmd = resolveServerCommand(settings({ path: ['~/bin/torch-preflight'], interpreter: ['/usr/bin/python3'] }), ctx, LAUNCHER, found);
        assert.deepEqual(cmd, { command: '/home/me/bin/torch-preflight', prefix: [], source: 'path' });
        assert.deepEqual(serverArgs(cmd), ['server']);
    });

    it('uses a discovered Python when no setting names one', () => {
        const fromExt = resolveServerCommand(settings(), ctx, LAUNCHER, { argv: ['/py/ext/bin/python'], source: 'python-extension' });
        assert.deepEqual(fromExt, { command: '/py/ext/bin/python', prefix: [LAUNCHER], source: 'python-extension', env: BUNDLED });
        const found = resolveServerCommand(settings({ interpreter: ['  '] }), ctx, LAUNCHER, { argv: ['py', '-3'], source: 'found' });
        assert.deepEqual(serverArgs(found), ['-3', LAUNCHER, 'server']);
        assert.equal(found.source, 'found');
    });

    it('an explicit interpreter wins over a discovered one', () => {
        const cmd = resolveServerCommand(settings({ interpreter: ['/mine/python'] }), ctx, LAUNCHER, { argv: ['/py/ext/bin/python'], source: 'python-extension' });
        assert.equal(cmd.command, '/mine/python');
    });

    it('without any Python: torch-preflight on PATH for fromEnvironment, nothing to run for useBundled', () => {
        const onPath = resolveServerCommand(settings({ importStrategy: 'fromEnvironment' }), ctx, LAUNCHER);
        assert.deepEqual(onPath, { command: 'torch-preflight', prefix: [], source: 'PATH' });
        const none = resolveServerCommand(settings(), ctx, LAUNCHER);
        assert.equal(none.source, 'none');
        assert.match(installHint(none, 'exit code 1'), /No Python 3\.11 or newer was found/);
    });

    it('searches only when no setting names the interpreter or the executable', () => {
        assert.equal(needsDiscovery(settings()), true);
        assert.equal(needsDiscovery(settings({ interpreter: [' '] })), true);
        assert.equal(needsDiscovery(settings({ interpreter: ['/py'] })), false);
        assert.equal(needsDiscovery(settings({ path: ['/bin/torch-preflight'] })), false);
    });

    it('lists versioned interpreters, and the py launcher on Windows', () => {
        assert.deepEqual(pythonCandidates('linux')[0], ['python3']);
        assert.ok(pythonCandidates('darwin').some((argv) => argv[0] === 'python3.11'));
        assert.deepEqual(pythonCandidates('win32')[0], ['py', '-3']);
    });
});

describe('resolveVariables', () => {
    it('expands workspaceFolder, userHome, env and ~', () => {
        assert.equal(resolveVariables('${env:VENV}/bin/python', ctx), '/opt/venv/bin/python');
        assert.equal(resolveVariables('${userHome}/x', ctx), '/home/me/x');
        assert.equal(resolveVariables('~', ctx), '/home/me');
        assert.equal(resolveVariables('a~b', ctx), 'a~b');
        assert.equal(resolveVariables('${env:MISSING}x', ctx), 'x');
    });

    it('leaves ${workspaceFolder} alone without a folder', () => {
        assert.equal(resolveVariables('${workspaceFolder}/p', { userHome: '/h', env: {} }), '${workspaceFolder}/p');
    });
});

describe('toServerSettings', () => {
    it('sends the defaults with inlay hints on and no budget', () => {
        assert.deepEqual(toServerSettings(settings()), { select: [], ignore: [], inlayHints: { enabled: true } });
    });

    it('normalises codes, keeps the budget and the hint switch', () => {
        const out = toServerSettings(
            settings({ select: ['tpf0', ' TPF1 ', 'TPF0', ''], ignore: ['tpf007'], gpuMemory: ' 24GiB ', gpu: 'a100-80gb', inlayHintsEnabled: false }),
        );
        assert.deepEqual(out, { select: ['TPF0', 'TPF1'], ignore: ['TPF007'], gpuMemory: '24GiB', gpu: 'a100-80gb', inlayHints: { enabled: false } });
    });

    it('omits empty budget strings and survives non-list values', () => {
        const out = toServerSettings(settings({ gpuMemory: '', gpu: null, select: 'TPF001' as unknown as string[], ignore: null as unknown as string[] }));
        assert.deepEqual(out, { select: ['TPF001'], ignore: [], inlayHints: { enabled: true } });
    });
});

describe('settingsWarnings', () => {
    it('flags an unreadable memory size and a bad code, accepts good ones', () => {
        assert.deepEqual(settingsWarnings(settings({ gpuMemory: '24GiB', select: ['TPF0', 'ALL'] })), []);
        assert.deepEqual(settingsWarnings(settings({ gpuMemory: '80 GB' })), []);
        const warnings = settingsWarnings(settings({ gpuMemory: 'lots', ignore: ['TPF-1'] }));
        assert.equal(warnings.length, 2);
        assert.match(warnings[0], /gpuMemory.*lots/);
        assert.match(warnings[1], /TPF-1/);
    });
});

describe('classifyChange', () => {
    const affects = (...keys: string[]) => (key: string) => keys.includes(key);
    it('restarts for interpreter and path', () => {
        assert.equal(classifyChange(affects('interpreter')), 'restart');
        assert.equal(classifyChange(affects('path', 'select')), 'restart');
        assert.equal(classifyChange(affects(), true), 'restart');
    });
    it('notifies for the live settings', () => {
        for (const key of ['select', 'ignore', 'gpuMemory', 'gpu', 'inlayHints.enabled']) {
            assert.equal(classifyChange(affects(key)), 'notify', key);
        }
    });
    it('ignores trace and unrelated keys', () => {
        assert.equal(classifyChange(affects('trace.server')), 'none');
        assert.equal(classifyChange(affects()), 'none');
    });
});

describe('estimateArgs', () => {
    it('builds the estimate command line with the budget', () => {
        const cmd = resolveServerCommand(settings({ interpreter: ['/py'] }), ctx, LAUNCHER);
        assert.deepEqual(estimateArgs(cmd, '/ws/train.py', settings({ gpuMemory: '24GiB', gpu: 'a100-80gb' })), [
            LAUNCHER, 'estimate', '/ws/train.py', '--format', 'json', '--gpu-memory', '24GiB',
        ]);
        const exe = resolveServerCommand(settings({ path: ['/bin/tp'] }), ctx, LAUNCHER);
        assert.deepEqual(estimateArgs(exe, 'a.py', settings({ gpu: 'h100-80gb' })), ['estimate', 'a.py', '--format', 'json', '--gpu', 'h100-80gb']);
    });
});

describe('installHint', () => {
    it('asks for a Python 3.11 or newer, naming the interpreter and the reason', () => {
        const cmd = resolveServerCommand(settings({ interpreter: ['/py'] }), ctx, LAUNCHER);
        const hint = installHint(cmd, 'torch-preflight needs Python >= 3.11');
        assert.match(hint, /"\/py" is one/);
        assert.match(hint, /torch-preflight needs Python >= 3\.11/);
    });
    it('explains PATH and settings when nothing is found in fromEnvironment mode', () => {
        const hint = installHint(resolveServerCommand(settings({ importStrategy: 'fromEnvironment' }), ctx, LAUNCHER), 'not found');
        assert.match(hint, /torchPreflight\.interpreter/);
        assert.match(hint, /torchPreflight\.path/);
    });
});
