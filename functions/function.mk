# How `sam build` (BuildMethod: makefile) builds a function: it sets ARTIFACTS_DIR and runs the
# target build-<LogicalId> of the function's Makefile, which sets HERE and includes this file.
# The function ships only its handler: the domain code and dependencies come from AgentLayer.

build-%Function:
	@test -n "$(ARTIFACTS_DIR)" || { echo "ARTIFACTS_DIR is not set" >&2; exit 2; }
	mkdir -p "$(ARTIFACTS_DIR)"
	cp "$(HERE)/app.py" "$(ARTIFACTS_DIR)/app.py"
	# a function's declared tools (ToolsFile: functions/consumer/*.json), its persona
	# (SystemPromptFile: functions/consumer/*.md or *.txt) and its fixed replies (RepliesFile:
	# functions/consumer/*.toml) ship beside its handler
	$(foreach file,$(wildcard $(HERE)/*.json $(HERE)/*.md $(HERE)/*.txt $(HERE)/*.toml),cp "$(file)" "$(ARTIFACTS_DIR)/";)
