-- Drives a real Neovim (0.11+) against `torch-preflight server`, the way a user's config does.
-- Run: TPF_SERVER_CMD='["torch-preflight","server"]' TPF_FILE=train.py TPF_RESULT=out.json \
--        nvim --headless --clean -l tests/editors/neovim_test.lua
-- It records what the editor shows into TPF_RESULT (JSON); tests/test_neovim.py asserts it.
-- Steps that cannot complete (no client, no diagnostics) abort with a non-zero exit.

local result = { steps = {}, messages = {} }
local result_path = assert(os.getenv('TPF_RESULT'), 'TPF_RESULT not set')
local file = assert(os.getenv('TPF_FILE'), 'TPF_FILE not set')
local cmd = vim.json.decode((assert(os.getenv('TPF_SERVER_CMD'), 'TPF_SERVER_CMD not set')))
local TIMEOUT = tonumber(os.getenv('TPF_TIMEOUT_MS') or '20000')

local function save()
  local f = assert(io.open(result_path, 'w'))
  f:write(vim.json.encode(result))
  f:close()
end

local function finish(code, err)
  if err then
    result.error = err
    io.stderr:write('neovim_test.lua: ' .. err .. '\n')
  end
  save()
  vim.cmd((code == 0) and 'qall!' or ('cquit ' .. code))
end

local function buffer_text(bufnr)
  return table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false), '\n') .. '\n'
end

local function diagnostics(bufnr)
  local out = {}
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    table.insert(out, {
      code = d.code,
      source = d.source,
      lnum = d.lnum,
      col = d.col,
      severity = d.severity,
      message = d.message,
    })
  end
  table.sort(out, function(a, b) return a.lnum < b.lnum end)
  return out
end

local function find_diag(bufnr, code)
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    if d.code == code then
      return d
    end
  end
end

-- The configuration docs/editors/neovim.md shows (Neovim 0.11+: vim.lsp.config / vim.lsp.enable).
vim.lsp.config('torch_preflight', {
  cmd = cmd,
  filetypes = { 'python' },
  root_markers = { 'pyproject.toml', '.git' },
  init_options = {
    select = {},
    ignore = {},
    inlayHints = { enabled = true },
  },
  settings = {
    torchPreflight = {
      select = {},
      ignore = {},
      inlayHints = { enabled = true },
    },
  },
  on_attach = function(client, bufnr)
    if client:supports_method('textDocument/inlayHint') then
      vim.lsp.inlay_hint.enable(true, { bufnr = bufnr })
    end
  end,
})
vim.lsp.enable('torch_preflight')

-- Record window/showMessage (bad-settings warnings and the like).
vim.lsp.handlers['window/showMessage'] = function(_, params)
  table.insert(result.messages, params.message)
end

local ok, err = xpcall(function()
  vim.cmd('filetype plugin indent on')
  vim.cmd.edit(vim.fn.fnameescape(file))
  local bufnr = vim.api.nvim_get_current_buf()
  if vim.bo[bufnr].filetype ~= 'python' then
    vim.bo[bufnr].filetype = 'python'
  end

  -- 1. The client attaches.
  local client
  if not vim.wait(TIMEOUT, function()
    client = vim.lsp.get_clients({ bufnr = bufnr, name = 'torch_preflight' })[1]
    return client ~= nil and client.initialized
  end, 50) then
    error('the server did not attach within ' .. TIMEOUT .. ' ms')
  end
  result.server_name = client.server_info and client.server_info.name
  result.offset_encoding = client.offset_encoding
  table.insert(result.steps, 'attached')

  -- 2. Diagnostics for the bad script.
  if not vim.wait(TIMEOUT, function()
    return find_diag(bufnr, 'TPF001') ~= nil and find_diag(bufnr, 'TPF007') ~= nil
  end, 50) then
    result.diagnostics = diagnostics(bufnr)
    error('no TPF001 + TPF007 diagnostics within ' .. TIMEOUT .. ' ms')
  end
  result.diagnostics = diagnostics(bufnr)
  table.insert(result.steps, 'diagnostics')

  -- 3. Quick fixes, through the user path: cursor on the finding, vim.lsp.buf.code_action.
  local function apply_fix(code, title_pattern, key)
    local d = find_diag(bufnr, code)
    if not d then
      error(code .. ' is not shown before its fix')
    end
    local before = buffer_text(bufnr)
    vim.api.nvim_win_set_cursor(0, { d.lnum + 1, d.col })
    local titles = {}
    vim.lsp.buf.code_action({
      context = { only = { 'quickfix' }, diagnostics = { d.user_data and d.user_data.lsp or nil } },
      filter = function(action)
        table.insert(titles, action.title)
        return action.title:find(title_pattern, 1, true) ~= nil
      end,
      apply = true,
    })
    if not vim.wait(TIMEOUT, function() return buffer_text(bufnr) ~= before end, 50) then
      result[key .. '_titles'] = titles
      error('the ' .. code .. ' quick fix ("' .. title_pattern .. '") changed nothing; offered: ' .. table.concat(titles, ' | '))
    end
    result[key .. '_titles'] = titles
    result[key] = buffer_text(bufnr)
    -- The server re-analyses the edited buffer: the finding goes away.
    if not vim.wait(TIMEOUT, function() return find_diag(bufnr, code) == nil end, 50) then
      error(code .. ' is still shown after its quick fix')
    end
    table.insert(result.steps, key)
  end

  apply_fix('TPF001', 'optimizer.zero_grad()', 'after_zero_grad')
  apply_fix('TPF007', 'with torch.no_grad():', 'after_no_grad')
  result.diagnostics_after_fixes = diagnostics(bufnr)

  -- 4. Inlay hints for the whole buffer (the same request Neovim's inlay-hint display sends).
  local last = vim.api.nvim_buf_line_count(bufnr)
  local hints = client:request_sync('textDocument/inlayHint', {
    textDocument = vim.lsp.util.make_text_document_params(bufnr),
    range = { start = { line = 0, character = 0 }, ['end'] = { line = last, character = 0 } },
  }, TIMEOUT, bufnr)
  result.inlay_hints = {}
  if hints and hints.result then
    for _, h in ipairs(hints.result) do
      local label = h.label
      if type(label) == 'table' then
        local parts = {}
        for _, p in ipairs(label) do table.insert(parts, p.value) end
        label = table.concat(parts)
      end
      table.insert(result.inlay_hints, { line = h.position.line, label = label })
    end
  elseif hints and hints.err then
    result.inlay_hint_error = hints.err.message
  end
  -- And what the editor itself fetched after vim.lsp.inlay_hint.enable().
  vim.wait(2000, function() return #vim.lsp.inlay_hint.get({ bufnr = bufnr }) > 0 end, 50)
  result.inlay_hints_displayed = #vim.lsp.inlay_hint.get({ bufnr = bufnr })
  table.insert(result.steps, 'inlay_hints')

  -- 5. Hover on the first layer (`self.fc1`).
  local lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  for i, line in ipairs(lines) do
    local col = line:find('fc1 = ', 1, true)
    if col then
      vim.api.nvim_win_set_cursor(0, { i, col - 1 })
      break
    end
  end
  local hover = client:request_sync('textDocument/hover',
    vim.lsp.util.make_position_params(0, client.offset_encoding), TIMEOUT, bufnr)
  if hover and hover.result and hover.result.contents then
    local c = hover.result.contents
    result.hover = type(c) == 'string' and c or (c.value or vim.json.encode(c))
  elseif hover and hover.err then
    result.hover_error = hover.err.message
  end
  table.insert(result.steps, 'hover')

  -- 6. Closing the buffer clears its diagnostics; shutdown is clean.
  vim.cmd('bwipeout!')
  client:stop()
  result.stopped = vim.wait(TIMEOUT, function() return client:is_stopped() end, 50)
end, debug.traceback)

if ok then
  finish(0)
else
  finish(1, tostring(err))
end
