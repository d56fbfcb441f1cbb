import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
    DEFAULT_SETTINGS,
    ExtensionSettings,
    classifyChange,
    estimateArgs,
    installHint,
    resolveServerCommand,
    resolveVariables,
    serverArgs,
    settingsWarnings,
    toServerSettings,
} from '../common/serverOptions';

const ctx = { workspaceFolder: '/ws', userHome: '/home/me', env: { VENV: '/opt/venv' } };
const settings = (over: Partial<ExtensionSettings> = {}): ExtensionSettings => ({ ...DEFAULT_SETTINGS, ...over });

describe('resolveServerCommand', () => {
    it('runs the configured interpreter with -m torch_preflight server', () => {
        const cmd = resolveServerCommand(settings({ interpreter: ['${workspaceFolder}/.venv/bin/python'] }), ctx);
        assert.deepEqual(cmd, { command: '/ws/.venv/bin/python', prefix: ['-m', 'torch_preflight'], source: 'interpreter' });
        assert.deepEqual(serverArgs(cmd), ['-m', 'torch_preflight', 'server']);
    });

    it('keeps interpreter arguments before -m', () => {
        const cmd = resolveServerCommand(settings({ interpreter: ['/usr/bin/python3', '-X', 'utf8'] }), ctx);
        assert.deepEqual(serverArgs(cmd), ['-X', 'utf8', '-m', 'torch_preflight', 'server']);
    });

    it('prefers torchPreflight.path over the interpreter and appends server', () => {
        const cmd = resolveServerCommand(settings({ path: ['~/bin/torch-preflight'], interpreter: ['/usr/bin/python3'] }), ctx, ['/py/ext']);
        assert.equal(cmd.source, 'path');
        assert.equal(cmd.command, '/home/me/bin/torch-preflight');
        assert.deepEqual(serverArgs(cmd), ['server']);
    });

    it("falls back to the Python extension's interpreter, then to torch-preflight on PATH", () => {
        const fromExt = resolveServerCommand(settings(), ctx, ['/py/ext/bin/python']);
        assert.deepEqual(fromExt, { command: '/py/ext/bin/python', prefix: ['-m', 'torch_preflight'], source: 'python-extension' });
        const onPath = resolveServerCommand(settings({ interpreter: ['  '] }), ctx, undefined);
        assert.deepEqual(onPath, { command: 'torch-preflight', prefix: [], source: 'PATH' });
        assert.deepEqual(serverArgs(onPath), ['server']);
    });

    it('an explicit interpreter wins over the Python extension', () => {
        const cmd = resolveServerCommand(settings({ interpreter: ['/mine/python'] }), ctx, ['/py/ext/bin/python']);
        assert.equal(cmd.command, '/mine/python');
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
        const cmd = resolveServerCommand(settings({ interpreter: ['/py'] }), ctx);
        assert.deepEqual(estimateArgs(cmd, '/ws/train.py', settings({ gpuMemory: '24GiB', gpu: 'a100-80gb' })), [
            '-m', 'torch_preflight', 'estimate', '/ws/train.py', '--format', 'json', '--gpu-memory', '24GiB',
        ]);
        const exe = resolveServerCommand(settings({ path: ['/bin/tp'] }), ctx);
        assert.deepEqual(estimateArgs(exe, 'a.py', settings({ gpu: 'h100-80gb' })), ['estimate', 'a.py', '--format', 'json', '--gpu', 'h100-80gb']);
    });
});

describe('installHint', () => {
    it('says how to install into the interpreter', () => {
        const cmd = resolveServerCommand(settings({ interpreter: ['/py'] }), ctx);
        const hint = installHint(cmd, 'No module named torch_preflight');
        assert.match(hint, /"\/py" -m pip install pytorch-preflight/);
        assert.match(hint, /No module named torch_preflight/);
    });
    it('explains PATH and settings when nothing is configured', () => {
        const hint = installHint(resolveServerCommand(settings(), ctx), 'not found');
        assert.match(hint, /torchPreflight\.interpreter/);
        assert.match(hint, /torchPreflight\.path/);
    });
});
